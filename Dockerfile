# The csi-pv-controller image, from a root prepared by deploy/image-root.sh (`make image`): the
# release binary, the four glibc libraries it links (as distroless/cc carries them), and an
# /etc/passwd naming the non-root user. No shell, no package manager, no base image to pull, so
# Debian's buildah builds it without a daemon or a registry:
#   buildah --storage-driver vfs bud --isolation chroot -t csi-pv-controller:v0.1.0 .
# deploy/Dockerfile.musl builds a static binary from source where registries are reachable.
FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="csi-pv-controller" \
      org.opencontainers.image.description="Provisions, binds, expands and deletes the volumes of one CSI driver" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY target/image-root/ /
USER 65532:65532
ENTRYPOINT ["/csi-pv-controller"]
