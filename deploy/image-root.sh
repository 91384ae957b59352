#!/usr/bin/env bash
# Stages target/image-root/ for the Dockerfile: the release binary and the shared libraries it
# needs (as ldd resolves them on this machine), at the same paths, and /etc/passwd with the
# non-root user 65532 the image runs as.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=target/release/csi-pv-controller
root=target/image-root
rm -rf "$root"
mkdir -p "$root/etc"
install -s -m 0755 "$binary" "$root/csi-pv-controller"
ldd "$binary" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
echo "image root: $(du -sh "$root" | cut -f1) in $root"
