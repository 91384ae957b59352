# The csi-pv-controller image, one per architecture, built from a clean checkout:
#   docker buildx build --platform linux/amd64,linux/arm64 -t csi-pv-controller:dev .
#   buildah bud --platform linux/arm64 -t csi-pv-controller:dev .
# The first stage compiles on the build machine's own platform (amd64: deploy/build-static.sh
# cross-compiles arm64) a static (musl) release binary and stages the image root
# (deploy/image-root.sh): the binary, its CycloneDX SBOM at /sbom/, and /etc/passwd naming root
# and the non-root user 65532. The image itself has no shell, no libraries and no base image.
#
# Where no registry is reachable, `make image` compiles on the host and hands the staged root
# over in place of the first two stages:
#   buildah bud --build-context root=target/image-root/arm64 --platform linux/arm64 ...
#
# It runs as root, as csi-provisioner's and csi-resizer's images do, so that swapping only the
# image in a driver's controller pod opens a root-owned driver socket; docs/switching.md says
# what the non-root variant (runAsUser 65532) needs.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm

FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS compile
ARG TARGETARCH
# The SBOM's timestamp: the commit's time, when the builder passes it.
ARG SOURCE_DATE_EPOCH
WORKDIR /src
COPY . .
RUN deploy/build-static.sh "${TARGETARCH}" \
 && deploy/image-root.sh "${TARGETARCH}" \
 && mv "target/image-root/${TARGETARCH}" /image-root

FROM scratch AS root
COPY --from=compile /image-root/ /

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="csi-pv-controller" \
      org.opencontainers.image.description="Provisions, binds, expands and deletes the volumes of one CSI driver" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=root / /
USER 0:0
ENTRYPOINT ["/csi-pv-controller"]
