#!/usr/bin/env bash
# A local stand-in for docker.io/library/rust:<version>-bookworm, for `make image-from-source`
# where no container registry is reachable: Debian bookworm from Debian's archive (debootstrap)
# with gcc, curl and python3, and Rust from rustup (static.rust-lang.org), committed by buildah
# as localhost/rust:<version>-bookworm with the official image's paths (RUSTUP_HOME,
# CARGO_HOME, PATH).
#   rust-image.sh 1.95
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: rust-image.sh RUST-VERSION}
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
root=target/rust-image-root
rm -rf "$root"
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
debootstrap --variant=minbase --include=gcc,libc6-dev,make,curl,ca-certificates,python3,git \
  bookworm "$root" "${mirror:-http://deb.debian.org/debian}" > target/rust-image-debootstrap.log
curl -fsSL -o "$root/rustup-init" \
  https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init
chmod +x "$root/rustup-init"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The machine's own certificate authorities (a proxy's among them, where one stands between it
# and the Internet), so that rustup, cargo and curl in the image reach what this machine does.
if [ -d /usr/local/share/ca-certificates ]; then
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
chroot "$root" env RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \
  /rustup-init -y -q --no-modify-path --profile minimal --default-toolchain "$version"
umount "$root/proc"
rm -f "$root/rustup-init"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
image=localhost/rust:$version-bookworm
container=$(buildah --storage-driver vfs from scratch)
buildah --storage-driver vfs copy "$container" "$root/" / >/dev/null
buildah --storage-driver vfs config \
  --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
  --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  "$container"
buildah --storage-driver vfs commit -q "$container" "$image" >/dev/null
buildah --storage-driver vfs rm "$container" >/dev/null
rm -rf "$root"
echo "rust-image: $image"
