#!/usr/bin/env bash
# Checks the built image's config (non-root user, entrypoint, labels) and unpacks its one layer
# into target/image-unpacked/, so that the binary inside can be run as it ships.
set -euo pipefail
cd "$(dirname "$0")/.."
image=$1 archive=$2
config=$(buildah --storage-driver vfs inspect --type image "$image")
fail() { echo "image-check: $*" >&2; exit 1; }
user=$(jq -r '.OCIv1.config.User' <<<"$config")
entrypoint=$(jq -c '.OCIv1.config.Entrypoint' <<<"$config")
title=$(jq -r '.OCIv1.config.Labels["org.opencontainers.image.title"]' <<<"$config")
version=$(jq -r '.OCIv1.config.Labels["org.opencontainers.image.version"]' <<<"$config")
[ "$user" = "65532:65532" ] || fail "user is '$user', not 65532:65532"
[ "$entrypoint" = '["/csi-pv-controller"]' ] || fail "entrypoint is $entrypoint"
[ "$title" = "csi-pv-controller" ] || fail "title label is '$title'"
[ "$version" = "${image##*:}" ] || fail "version label '$version' is not the tag ${image##*:}"
out=target/image-unpacked
rm -rf "$out" && mkdir -p "$out/oci"
tar -xf "$archive" -C "$out/oci"
manifest=$(jq -r '.manifests[0].digest' "$out/oci/index.json" | sed 's/sha256://')
layers=$(jq -r '.layers[].digest' "$out/oci/blobs/sha256/$manifest" | sed 's/sha256://')
for layer in $layers; do
  tar -xf "$out/oci/blobs/sha256/$layer" -C "$out"
done
[ -x "$out/csi-pv-controller" ] || fail "no /csi-pv-controller in the image"
# The image's own loader and libraries, not the machine's.
"$out/lib64/ld-linux-x86-64.so.2" --library-path "$out/lib/x86_64-linux-gnu" "$out/csi-pv-controller" --version
echo "image-check: $image runs as $user, entrypoint $entrypoint; $(du -h "$archive" | cut -f1) archive, $(du -sh --exclude=oci "$out" | cut -f1) unpacked"
