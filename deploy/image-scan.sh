#!/usr/bin/env bash
# Reads the image archive with a real scanner, syft (built from the Go module proxy into the
# peers cache), as an image scanner in a registry or a pipeline would: its default catalogers
# find the crates from the binary's cargo-auditable section, and its SBOM cataloger reads the
# CycloneDX file at /sbom/. Both must name tokio, ring and kube-client with their versions.
#   image-scan.sh <archive> <bin dir>
set -euo pipefail
archive=$1 bin=$2
syft_version=v1.57.1
# A module build reports no version of its own: a stamp beside it says which one it is.
if [ "$(cat "$bin/syft.version" 2>/dev/null)" != "$syft_version" ]; then
  GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/anchore/syft/cmd/syft@$syft_version"
  echo "$syft_version" > "$bin/syft.version"
fi
fail() { echo "image-scan: $*" >&2; exit 1; }
out=target/image-scan
mkdir -p "$out"
# The default image catalogers, plus the SBOM cataloger (not a default for images).
"$bin/syft" scan "oci-archive:$archive" -q --select-catalogers +sbom-cataloger -o json > "$out/syft.json"
for cataloger in cargo-auditable-binary-cataloger sbom-cataloger; do
  for crate in tokio ring kube-client; do
    jq -e --arg c "$crate" --arg by "$cataloger" \
      '.artifacts[] | select(.foundBy == $by and .name == $c and (.purl | startswith("pkg:cargo/" + $c + "@")))' \
      "$out/syft.json" >/dev/null || fail "syft's $cataloger does not find the crate $crate"
  done
  echo "image-scan: syft $syft_version, $cataloger: $(jq --arg by "$cataloger" '[.artifacts[] | select(.foundBy == $by)] | length' "$out/syft.json") crates"
done
