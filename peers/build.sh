#!/usr/bin/env bash
# Builds the real peers the tests run against, from the Go modules pinned in this folder, into a
# cache outside the clone keyed by version. A peer already in the cache is not rebuilt, so a second
# run is a no-op. Usage: peers/build.sh [test|bench|hostpath]
#   test      etcd, kube-apiserver, csi-sanity: what `make test` needs
#   bench     also kube-controller-manager, csi-provisioner and csi-resizer: the upstream stack of
#             the side-by-side benchmark (`make bench-stacks`)
#   hostpath  csi-driver-host-path's hostpathplugin; blocked here (see peers/hostpath/go.mod)
#
# Layout: $PEERS_CACHE/<name>-<version>/<name>, and $PEERS_CACHE/bin/<name> -> that file.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-pv-controller/peers}
set_name=${1:-test}

export GOTOOLCHAIN=local   # a module asking for a newer Go must fail, not download a toolchain
export CGO_ENABLED=0       # upstream ships these statically linked
export GOFLAGS="-mod=readonly -buildvcs=false"  # the committed go.sum must be complete

# The version a module pins for a given Go module path, read from its go.mod.
pinned() { sed -n "s#^[[:space:]]*\(require \)\{0,1\}$2 \(v[^ ]*\).*#\2#p" "$here/$1/go.mod" | head -n1; }

KUBE_VERSION=$(pinned k8s k8s.io/kubernetes)
ETCD_VERSION=$(pinned etcd go.etcd.io/etcd/server/v3)
SANITY_VERSION=$(pinned csi github.com/kubernetes-csi/csi-test/v5)
PROVISIONER_VERSION=$(pinned provisioner github.com/kubernetes-csi/external-provisioner/v6)
RESIZER_VERSION=$(pinned resizer github.com/kubernetes-csi/external-resizer/v2)

mkdir -p "$cache/bin"

# build NAME VERSION MODULE_DIR PACKAGE [go build flags...]
build() {
  local name=$1 version=$2 dir=$3 pkg=$4
  shift 4
  local out="$cache/$name-$version/$name"
  if [[ -x "$out" ]]; then
    echo "peers: $name $version cached at $out"
  else
    echo "peers: building $name $version (first build of this version)"
    local start=$SECONDS tmp="$cache/$name-$version.tmp"
    rm -rf "$tmp" && mkdir -p "$tmp"
    (cd "$here/$dir" && go build -trimpath "$@" -o "$tmp/$name" "$pkg")
    rm -rf "$cache/$name-$version" && mv "$tmp" "$cache/$name-$version"
    echo "peers: built $name $version in $((SECONDS - start))s"
  fi
  ln -sfn "$out" "$cache/bin/$name"
}

kube_ldflags() {
  local minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  local f="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f="$f -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$f"
}

build etcd "$ETCD_VERSION" etcd go.etcd.io/etcd/server/v3 -ldflags="-s -w"
build csi-sanity "$SANITY_VERSION" csi github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity \
  -ldflags="-s -w -X main.VERSION=$SANITY_VERSION"
build kube-apiserver "$KUBE_VERSION" k8s k8s.io/kubernetes/cmd/kube-apiserver \
  -tags=selinux,notest -ldflags="$(kube_ldflags)"

if [[ "$set_name" == bench ]]; then
  build kube-controller-manager "$KUBE_VERSION" k8s k8s.io/kubernetes/cmd/kube-controller-manager \
    -tags=selinux,notest -ldflags="$(kube_ldflags)"
  # Both report main.version in their logs and metrics; upstream's release builds set it.
  build csi-provisioner "$PROVISIONER_VERSION" provisioner \
    github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner \
    -ldflags="-s -w -X main.version=$PROVISIONER_VERSION"
  build csi-resizer "$RESIZER_VERSION" resizer \
    github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer \
    -ldflags="-s -w -X main.version=$RESIZER_VERSION"
fi

if [[ "$set_name" == hostpath ]]; then
  HOSTPATH_VERSION=$(pinned hostpath github.com/kubernetes-csi/csi-driver-host-path)
  if [[ ! -x "$cache/hostpathplugin-$HOSTPATH_VERSION/hostpathplugin" ]]; then
    (cd "$here/hostpath" && go mod tidy)
  fi
  # GetPluginInfo answers Unavailable unless main.version is set at link time.
  build hostpathplugin "$HOSTPATH_VERSION" hostpath \
    github.com/kubernetes-csi/csi-driver-host-path/cmd/hostpathplugin \
    -ldflags="-s -w -X main.version=$HOSTPATH_VERSION"
fi

echo "peers: ready in $cache/bin"
