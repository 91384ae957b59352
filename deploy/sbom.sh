#!/usr/bin/env bash
# The image's SBOM, CycloneDX 1.5 JSON, for one target: cargo-cyclonedx lists every crate
# compiled into the release binary for that target (build and dev dependencies left out), each
# with its version, licence, hash and package URL, which is how scanners match crates to
# advisories; deploy/sbom-musl.py adds the C library the binary links statically, musl, at the
# version rustup's self-contained musl target carries. SOURCE_DATE_EPOCH (the commit's time by
# default) makes the same tree give the same file.
#   sbom.sh TARGET-TRIPLE OUT.cdx.json
set -euo pipefail
cd "$(dirname "$0")/.."
triple=$1 out=$2
cargo cyclonedx --version >/dev/null 2>&1 || cargo install --locked cargo-cyclonedx --version 0.5.9
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# It writes one file beside each workspace member's Cargo.toml: the bench's is not wanted.
cargo cyclonedx -q --manifest-path Cargo.toml -f json --spec-version 1.5 --target "$triple" \
  --no-build-deps --override-filename csi-pv-controller.sbom
rm -f bench/csi-pv-controller.sbom.json
libc=$(rustc --print sysroot)/lib/rustlib/$triple/lib/self-contained/libc.a
python3 deploy/sbom-musl.py csi-pv-controller.sbom.json "$libc" "$out"
rm -f csi-pv-controller.sbom.json
