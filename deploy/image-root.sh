#!/usr/bin/env bash
# Stages target/image-root/<arch>/ for the Dockerfile: the static (musl) release binary built for
# that architecture, its SBOM (deploy/sbom.sh, CycloneDX, at /sbom/), and /etc/passwd and
# /etc/group naming root and the non-root user 65532 for the non-root variant. Nothing comes
# from the build machine's own libraries: the binary links none.
#   image-root.sh amd64|arm64
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$1
case "$arch" in
  amd64) triple=x86_64-unknown-linux-musl ;;
  arm64) triple=aarch64-unknown-linux-musl ;;
  *) echo "image-root: unknown architecture $arch" >&2; exit 2 ;;
esac
binary=target/$triple/release/csi-pv-controller
root=target/image-root/$arch
rm -rf "$root"
mkdir -p "$root/etc" "$root/sbom"
install -m 0755 "$binary" "$root/csi-pv-controller"
deploy/sbom.sh "$triple" "$root/sbom/csi-pv-controller.cdx.json"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
echo "image root ($arch): $(du -sh "$root" | cut -f1) in $root"
