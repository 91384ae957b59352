#!/usr/bin/env bash
# The static release binaries the image carries, for amd64 and arm64: Rust's musl targets
# (rustup), musl-gcc for x86_64's C code (ring) and Debian's aarch64 cross compiler for arm64's,
# which also links it against the musl objects the target ships. Symbols stripped. Built with
# cargo-auditable, so that each binary carries the list of crates inside it (section .dep-v0),
# which scanners (syft, trivy, grype, cargo audit bin) read from the image with no SBOM file.
#   build-static.sh amd64 arm64
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v python3 >/dev/null || need+=(python3)  # deploy/sbom-musl.py, after the build
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi
cargo auditable --version >/dev/null 2>&1 || cargo install --locked cargo-auditable --version 0.7.7
# The SBOM's lister (deploy/sbom.sh), installed here so that `make test` builds it in the
# background with the binaries rather than in the image step.
cargo cyclonedx --version >/dev/null 2>&1 || cargo install --locked cargo-cyclonedx --version 0.5.9
export CARGO_PROFILE_RELEASE_STRIP=symbols
export CC_x86_64_unknown_linux_musl=musl-gcc
export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
# mimalloc (the musl build's allocator) turns transparent huge pages off for the process: with
# them, its arenas count in resident memory by 2 MiB pages, which doubled the sidecar's peak.
export CFLAGS_x86_64_unknown_linux_musl=-DMI_DEFAULT_ALLOW_THP=0
export CFLAGS_aarch64_unknown_linux_musl=-DMI_DEFAULT_ALLOW_THP=0
for arch in "$@"; do
  case "$arch" in
    amd64) triple=x86_64-unknown-linux-musl ;;
    arm64) triple=aarch64-unknown-linux-musl ;;
    *) echo "build-static: unknown architecture $arch" >&2; exit 2 ;;
  esac
  rustup target list --installed | grep -x "$triple" >/dev/null || rustup target add "$triple"
  cargo auditable build --locked --release --target "$triple" --bin csi-pv-controller
done
