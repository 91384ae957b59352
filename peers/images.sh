#!/usr/bin/env bash
# The container images the node's pods run, built here without a registry and saved as docker
# archives under the names kubelet and Kubernetes' e2e suite ask for, so that containerd finds
# them present and pulls nothing. Called by peers/build.sh; cached like the other peers.
#   pause     the pod sandbox: pause.c from the Kubernetes module, linked statically
#   busybox   Debian's busybox-static with one link per applet: sh, dd, sha256sum, blockdev, …
#   e2e mode adds agnhost (the e2e helper on the busybox root), the busybox root under the name
#   of nginx (its one spec runs a shell), and glibc-dns-testing as upstream makes it: a minimal
#   Debian root (debootstrap), whose GNU dd the multi-volume specs need (oflag=nocache).
# Each image is named as the e2e suite of the Kubernetes module in use asks for it (its
# test/utils/image/manifest.go), since each minor moves some tags; busybox.ref and pause.ref in
# the images folder give the tests and containerd's sandbox setting the same names.
# Usage: peers/images.sh CACHE KUBE_VERSION test|bench|e2e [KUBE_MODULE_DIR, default k8s]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=$1 kube_version=$2 mode=$3 kube=${4:-k8s}

# The two files of the Kubernetes module read here (its image manifest and pause.c), kept in
# the cache: later runs need no module download (.ci/run empties the Go module cache).
sources="$cache/kubernetes-files-$kube_version"
if [[ ! -f $sources/manifest.go || ! -f $sources/pause.c ]]; then
  src=$(cd "$here/$kube" && go mod download -json k8s.io/kubernetes | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -f $src/test/utils/image/manifest.go ]] || { echo "peers: no image manifest in $src" >&2; exit 1; }
  rm -rf "$sources.tmp" && mkdir -p "$sources.tmp"
  cp "$src/test/utils/image/manifest.go" "$src/build/pause/linux/pause.c" "$sources.tmp/"
  rm -rf "$sources" && mv "$sources.tmp" "$sources"
fi
manifest=$sources/manifest.go
# ref NAME: the image the suite asks for as NAME, from a manifest line such as
#   configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-2"}
ref() {
  local fields registry
  fields=$(sed -nE "s/^[[:space:]]*configs\[$1\] = Config\{list\.([A-Za-z0-9]+), \"([^\"]+)\", \"([^\"]+)\"\}.*/\1 \2:\3/p" "$manifest")
  case ${fields%% *} in
    PromoterE2eRegistry) registry=registry.k8s.io/e2e-test-images ;;
    GcRegistry) registry=registry.k8s.io ;;
    *) echo "peers: cannot read the image $1 from $manifest (got '$fields')" >&2; return 1 ;;
  esac
  echo "$registry/${fields#* }"
}
PAUSE=$(ref Pause)
BUSYBOX=$(ref BusyBox)
AGNHOST=$(ref Agnhost)
BUSYBOX_ALIASES=("$(ref Nginx)")
# Older suites (1.35) have no glibc-dns-testing and need none.
GLIBC=""
grep -q 'configs\[GlibcDnsTesting\]' "$manifest" && GLIBC=$(ref GlibcDnsTesting)

need=()
command -v buildah >/dev/null || need+=(buildah)
[[ -x /bin/busybox ]] && /bin/busybox --list >/dev/null 2>&1 || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
# Not for the images but for the node that runs them: Debian's runc (containerd's runtime) and
# the CNI plugins of the pods' network.
[[ -x /usr/sbin/runc ]] || need+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || need+=(containernetworking-plugins)
command -v ip >/dev/null || need+=(iproute2)
# Not for the node either: the Prometheus parser the metrics tests read a scrape with.
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || need+=(python3-prometheus-client)
[[ $mode != e2e ]] || command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  echo "peers: installing ${need[*]} (Debian) for the node, its images and the metrics parser"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
busybox_version=$(dpkg-query -W -f='${Version}' busybox-static | tr ':+~' '___')

bah() { buildah --storage-driver vfs "$@"; }

# image NAME ARCHIVE ROOTFS [buildah config flags...]: ROOTFS as one layer, saved as ARCHIVE.
image() {
  local name=$1 archive=$2 rootfs=$3
  shift 3
  local container
  container=$(bah from --name "peers-image-$$" scratch)
  bah copy "$container" "$rootfs" / >/dev/null
  bah config "$@" "$container"
  bah commit --rm -q "$container" "$name" >/dev/null
  rm -f "$archive"
  bah push -q "$name" "docker-archive:$archive:$name"
  bah rmi -f "$name" >/dev/null
}

busybox_root() {
  local root=$1
  mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root"
  cp /bin/busybox "$root/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
  done
  mkdir -p "$root/usr" && ln -sfn ../bin "$root/usr/bin" && ln -sfn bin "$root/sbin"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  chmod 1777 "$root/tmp"
}

# The names are part of the key: a set built under other names is not taken for this one.
names=$(printf '%s\n' "$PAUSE" "$BUSYBOX" "$AGNHOST" "${BUSYBOX_ALIASES[@]}" "$GLIBC" | sha256sum | cut -c1-8)
out="$cache/images-$kube_version-busybox-$busybox_version-$names"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ ! -f $out/pause.tar ]]; then
  echo "peers: building the pause image $PAUSE"
  mkdir -p "$work/pause"
  gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE##*:}" -o "$work/pause/pause" "$sources/pause.c"
  strip "$work/pause/pause"
  image "$PAUSE" "$out/pause.tar.tmp" "$work/pause" --entrypoint '["/pause"]' --user 65535:65535
  mv "$out/pause.tar.tmp" "$out/pause.tar"
fi

if [[ ! -f $out/busybox.tar ]]; then
  echo "peers: building the busybox image $BUSYBOX from busybox-static $busybox_version"
  busybox_root "$work/busybox"
  image "$BUSYBOX" "$out/busybox.tar.tmp" "$work/busybox" --cmd '["sh"]'
  mv "$out/busybox.tar.tmp" "$out/busybox.tar"
fi

if [[ $mode == e2e ]]; then
  for alias in "${BUSYBOX_ALIASES[@]}"; do
    file="$out/$(basename "${alias%%:*}").tar"
    if [[ ! -f $file ]]; then
      echo "peers: building $alias (the busybox root under that name)"
      [[ -d $work/busybox ]] || busybox_root "$work/busybox"
      image "$alias" "$file.tmp" "$work/busybox" --cmd '["sh"]'
      mv "$file.tmp" "$file"
    fi
  done
  if [[ -n $GLIBC && ! -f $out/glibc-dns-testing.tar ]]; then
    echo "peers: building $GLIBC from a minimal Debian root (debootstrap)"
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    debootstrap --variant=minbase "$codename" "$work/debian" >"$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    rm -rf "$work/debian"/dev/* "$work/debian"/var/cache/apt/* "$work/debian"/var/lib/apt/lists/* "$work/debian"/usr/share/{doc,man,locale}
    image "$GLIBC" "$out/glibc-dns-testing.tar.tmp" "$work/debian" --cmd '["/bin/sh"]'
    rm -rf "$work/debian"
    mv "$out/glibc-dns-testing.tar.tmp" "$out/glibc-dns-testing.tar"
  fi
  if [[ ! -f $out/agnhost.tar ]]; then
    echo "peers: building the agnhost image $AGNHOST"
    [[ -d $work/busybox ]] || busybox_root "$work/busybox"
    cp "${PEERS_BIN_DIR:-$cache/bin}/agnhost" "$work/busybox/agnhost"
    image "$AGNHOST" "$out/agnhost.tar.tmp" "$work/busybox" --entrypoint '["/agnhost"]' --cmd '["pause"]'
    rm -f "$work/busybox/agnhost"
    mv "$out/agnhost.tar.tmp" "$out/agnhost.tar"
  fi
fi

echo "$BUSYBOX" >"$out/busybox.ref"
echo "$PAUSE" >"$out/pause.ref"
ln -sfn "$out" "${PEERS_BIN_DIR:-$cache/bin}/images"
echo "peers: images in $out: $(cd "$out" && echo *.tar)"
