# The csi-pv-controller image, one per architecture, from a root prepared by
# deploy/image-root.sh (`make image`): the static (musl) release binary, its CycloneDX SBOM at
# /sbom/, and /etc/passwd naming root and the non-root user 65532. No shell, no libraries, no
# base image to pull, so Debian's buildah builds it without a daemon or a registry:
#   buildah --storage-driver vfs bud --isolation chroot --platform linux/arm64 -t ... .
# It runs as root, as csi-provisioner's and csi-resizer's images do, so that swapping only the
# image in a driver's controller pod opens a root-owned driver socket; docs/switching.md says
# what the non-root variant (runAsUser 65532) needs.
FROM scratch
ARG VERSION=dev
ARG TARGETARCH
LABEL org.opencontainers.image.title="csi-pv-controller" \
      org.opencontainers.image.description="Provisions, binds, expands and deletes the volumes of one CSI driver" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY target/image-root/${TARGETARCH}/ /
USER 0:0
ENTRYPOINT ["/csi-pv-controller"]
