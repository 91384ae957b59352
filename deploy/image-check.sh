#!/usr/bin/env bash
# Checks the built images in the OCI archive, one per architecture ($ARCHES, by default amd64
# and arm64): each config
# (user root, entrypoint, labels, architecture), each layer unpacked into
# target/image-unpacked/<arch>/ with a static binary for that machine (no program interpreter,
# so nothing from the build host is needed) and a CycloneDX SBOM naming the crates inside. The
# amd64 binary is then run as it ships.
set -euo pipefail
cd "$(dirname "$0")/.."
image=$1 archive=$2
fail() { echo "image-check: $*" >&2; exit 1; }
out=target/image-unpacked
rm -rf "$out" && mkdir -p "$out/oci"
tar -xf "$archive" -C "$out/oci"
blob() { echo "$out/oci/blobs/sha256/${1#sha256:}"; }
# index.json may name the manifest list, which names one manifest per platform.
manifests=$(jq -r '.manifests[].digest' "$out/oci/index.json" | while read -r digest; do
  if jq -e '.manifests' "$(blob "$digest")" >/dev/null 2>&1; then
    jq -r '.manifests[].digest' "$(blob "$digest")"
  else
    echo "$digest"
  fi
done)
seen=()
for manifest in $manifests; do
  config=$(blob "$(jq -r '.config.digest' "$(blob "$manifest")")")
  arch=$(jq -r '.architecture' "$config")
  user=$(jq -r '.config.User' "$config")
  entrypoint=$(jq -c '.config.Entrypoint' "$config")
  title=$(jq -r '.config.Labels["org.opencontainers.image.title"]' "$config")
  version=$(jq -r '.config.Labels["org.opencontainers.image.version"]' "$config")
  [ "$user" = "0:0" ] || fail "$arch: user is '$user', not 0:0 (the upstream sidecars' root)"
  [ "$entrypoint" = '["/csi-pv-controller"]' ] || fail "$arch: entrypoint is $entrypoint"
  [ "$title" = "csi-pv-controller" ] || fail "$arch: title label is '$title'"
  [ "$version" = "${image##*:}" ] || fail "$arch: version label '$version' is not the tag ${image##*:}"
  root=$out/$arch
  mkdir -p "$root"
  for layer in $(jq -r '.layers[].digest' "$(blob "$manifest")"); do
    tar -xf "$(blob "$layer")" -C "$root"
  done
  binary=$root/csi-pv-controller
  [ -x "$binary" ] || fail "$arch: no /csi-pv-controller in the image"
  case "$arch" in
    amd64) machine="X86-64" ;;
    arm64) machine="AArch64" ;;
    *) fail "unexpected architecture $arch" ;;
  esac
  # readelf's output is read whole (not `grep -q`): under pipefail, a grep that stops at the first
  # match can leave readelf writing into a closed pipe, and its SIGPIPE would fail the check.
  headers=$(readelf -h -l -S "$binary")
  grep "Machine:.*$machine" <<<"$headers" >/dev/null || fail "$arch: the binary is not for $machine"
  ! grep "INTERP" <<<"$headers" >/dev/null || fail "$arch: the binary asks for a program interpreter: not static"
  grep '\.dep-v0' <<<"$headers" >/dev/null || fail "$arch: the binary has no cargo-auditable crate list (.dep-v0)"
  sbom=$root/sbom/csi-pv-controller.cdx.json
  [ "$(jq -r '.bomFormat' "$sbom")" = "CycloneDX" ] || fail "$arch: no CycloneDX SBOM at /sbom/"
  # mimalloc: the allocator the musl build links (src/main.rs).
  for crate in tokio kube-client ring tonic mimalloc; do
    jq -e --arg c "$crate" '.components[] | select(.name == $c) | .purl | startswith("pkg:cargo/")' "$sbom" >/dev/null \
      || fail "$arch: the SBOM does not name the crate $crate"
  done
  musl=$(jq -r '.components[] | select(.name == "musl") | .version' "$sbom")
  [[ "$musl" =~ ^1\.[0-9]+\.[0-9]+$ ]] || fail "$arch: the SBOM does not name musl with its version (got '$musl')"
  if [ "$arch" = amd64 ] && [ "$(uname -m)" = x86_64 ] && [ -e /sys/kernel/mm/transparent_hugepage/enabled ]; then
    # mimalloc turns transparent huge pages off for the process at its first allocation.
    "$binary" --csi-address=/nonexistent/csi.sock --csi-connect-timeout=3s >/dev/null 2>&1 &
    pid=$!
    sleep 1
    grep -q '^THP_enabled:[[:space:]]*0' "/proc/$pid/status" || fail "$arch: transparent huge pages are on for the process (mimalloc's MI_DEFAULT_ALLOW_THP=0 missing)"
    wait "$pid" || true
  fi
  echo "image-check: $arch: root, entrypoint $entrypoint, static $machine binary with its crate list, SBOM of $(jq '.components | length' "$sbom") components (musl $musl)"
  seen+=("$arch")
  if [ "$arch" = amd64 ]; then cp "$config" "$out/amd64.config.json"; fi
done
want=$(tr ' ' '\n' <<<"${ARCHES:-amd64 arm64}" | sort | xargs)
got=$(printf '%s\n' "${seen[@]}" | sort | xargs)
[ "$got" = "$want" ] || fail "architectures in the archive: ${got:-none}, not $want"
"$out/amd64/csi-pv-controller" --version
# The arm64 binary runs here under qemu's user-mode emulation (Debian's qemu-user-static).
if [ -d "$out/arm64" ]; then
  command -v qemu-aarch64-static >/dev/null || { apt-get update -qq && apt-get install -y -qq qemu-user-static; }
  qemu-aarch64-static "$out/arm64/csi-pv-controller" --version | grep "csi-pv-controller" >/dev/null \
    || fail "the arm64 binary does not run under qemu-aarch64-static"
  echo "image-check: the arm64 binary runs (qemu-aarch64-static)"
fi
# The image as a container: runc (Debian's, an OCI runtime) runs the unpacked amd64 image with
# its own entrypoint and user and a read-only root (deploy/runc-sidecar.sh, which the demo then
# runs through a whole lifecycle). Without a driver socket the process must say so in one error
# line and exit 1.
output=$out/runc-output
deploy/runc-sidecar.sh --version > "$output" 2>&1 || fail "runc could not run the image: $(cat "$output")"
grep -q "csi-pv-controller" "$output" || fail "the container printed $(cat "$output")"
code=0
deploy/runc-sidecar.sh --csi-address=/run/csi/socket --csi-connect-timeout=1s > "$output" 2>&1 || code=$?
[ "$code" = 1 ] && grep -q '^E.*not ready' "$output" \
  || fail "in the container without a driver: exit $code, $(cat "$output")"
echo "image-check: runc ran the amd64 image: $(head -1 "$output" | cut -c1-120)"
echo "image-check: $image: $(du -h "$archive" | cut -f1) archive, $(du -sh "$out/amd64" | cut -f1) unpacked (amd64)"
