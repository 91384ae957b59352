#!/usr/bin/env bash
# Builds the real peers the tests run against, from the Go modules pinned in this folder, into a
# cache outside the clone keyed by version. A peer already in the cache is not rebuilt, so a second
# run is a no-op. Usage: peers/build.sh [demo|test|bench|gate|e2e]
#   demo      etcd, kube-apiserver, kube-controller-manager and hostpathplugin: what `make demo`
#             runs
#   test      etcd, kube-apiserver, kube-controller-manager, csi-sanity, hostpathplugin,
#             snapshot-controller, csi-snapshotter and the VolumeSnapshot CRDs, csi-provisioner
#             and csi-resizer (the uninstall test), and a node: kubelet, kube-scheduler,
#             containerd with its runc shim and ctr, the plugin registrar (peers/registrar),
#             Prometheus' scrape parser (peers/promparse), the
#             pause and busybox images (the pod tests), and csi-driver-host-path's deployment
#             with csi-attacher and an image per container of its plugin pod
#             (peers/driver-images.sh, the swap tests): what `make test` needs
#   bench     the same: the upstream stack of the side-by-side benchmark (`make bench-stacks`)
#   gate      the same plus Kubernetes' storage e2e binary and ginkgo: what the e2e gate's
#             specs need (`make e2e-gate`, in .ci/run)
#   e2e       the same plus the agnhost, nginx and glibc-dns-testing images the whole suite
#             needs (`make e2e`)
#
# hostpathplugin is built offline from a source archive with its vendor/ folder (see
# peers/hostpath/source), found in $PEER_SOURCES: by default shared/peers beside the clone.
#
# Layout: $PEERS_CACHE/<name>-<version>/<name>, and $PEERS_CACHE/bin/<name> -> that file.
#
# PEERS_KUBE=k8s-1.35 takes the Kubernetes peers from peers/k8s-1.35 (the oldest supported minor,
# `make range`) and links the whole set in $PEERS_CACHE/bin-k8s-1.35 instead: both versions stay
# in the cache, and neither rebuilds the other.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-pv-controller/peers}
mode=${1:-test}
kube=${PEERS_KUBE:-k8s}
[[ -f "$here/$kube/go.mod" ]] || { echo "peers: no module peers/$kube" >&2; exit 2; }
bin=$cache/bin
[[ $kube == k8s ]] || bin=$cache/bin-$kube
export PEERS_BIN_DIR=$bin
case $mode in
  demo | test | bench | gate | e2e) ;;
  *) echo "usage: peers/build.sh [demo|test|bench|gate|e2e]" >&2; exit 2 ;;
esac

export GOTOOLCHAIN=local   # a module asking for a newer Go must fail, not download a toolchain
export CGO_ENABLED=0       # upstream ships these statically linked
export GOFLAGS="-mod=readonly -buildvcs=false"  # the committed go.sum must be complete

# The version a module pins for a given Go module path, read from its go.mod.
pinned() { sed -n "s#^[[:space:]]*\(require \)\{0,1\}$2 \(v[^ ]*\).*#\2#p" "$here/$1/go.mod" | head -n1; }

KUBE_VERSION=$(pinned "$kube" k8s.io/kubernetes)
ETCD_VERSION=$(pinned etcd go.etcd.io/etcd/server/v3)
SANITY_VERSION=$(pinned csi github.com/kubernetes-csi/csi-test/v5)
PROVISIONER_VERSION=$(pinned provisioner github.com/kubernetes-csi/external-provisioner/v6)
RESIZER_VERSION=$(pinned resizer github.com/kubernetes-csi/external-resizer/v2)
SNAPSHOTTER_VERSION=$(pinned snapshotter github.com/kubernetes-csi/external-snapshotter/v8)
SNAPSHOT_CLIENT=github.com/kubernetes-csi/external-snapshotter/client/v8

mkdir -p "$bin"

# build NAME VERSION MODULE_DIR PACKAGE [go build flags...]; GO_BUILD="test -c" compiles a
# test package instead.
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
    # shellcheck disable=SC2086 # GO_BUILD is words
    (cd "$here/$dir" && go ${GO_BUILD:-build} -trimpath "$@" -o "$tmp/$name" "$pkg")
    rm -rf "$cache/$name-$version" && mv "$tmp" "$cache/$name-$version"
    echo "peers: built $name $version in $((SECONDS - start))s"
  fi
  ln -sfn "$out" "$bin/$name"
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

# hostpathplugin from its source archive: checksum checked, vendored, no network.
build_hostpath() {
  local version archive sha256
  version=$(sed -n 's/^version=//p' "$here/hostpath/source")
  archive=$(sed -n 's/^archive=//p' "$here/hostpath/source")
  sha256=$(sed -n 's/^sha256=//p' "$here/hostpath/source")
  local out="$cache/hostpathplugin-$version/hostpathplugin"
  if [[ -x "$out" ]]; then
    echo "peers: hostpathplugin $version cached at $out"
  else
    local sources=${PEER_SOURCES:-$here/../../shared/peers}
    local file="$sources/$archive"
    if [[ ! -f "$file" ]]; then
      echo "peers: $file is missing: hostpathplugin $version is built from that source archive (with vendor/)." >&2
      echo "peers: set PEER_SOURCES to the folder that holds it (default: shared/peers beside the clone)." >&2
      exit 1
    fi
    if ! echo "$sha256  $file" | sha256sum -c --quiet -; then
      echo "peers: $file does not have the sha256 pinned in peers/hostpath/source; not building it" >&2
      exit 1
    fi
    echo "peers: building hostpathplugin $version from $file (offline, vendored)"
    local start=$SECONDS tmp="$cache/hostpathplugin-$version.tmp"
    rm -rf "$tmp" && mkdir -p "$tmp/src"
    tar xzf "$file" -C "$tmp/src" --strip-components=1
    # GetPluginInfo answers Unavailable unless main.version is set at link time.
    (cd "$tmp/src" && GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off \
      go build -trimpath -ldflags="-s -w -X main.version=$version" -o "$tmp/hostpathplugin" ./cmd/hostpathplugin)
    rm -rf "$tmp/src" "$cache/hostpathplugin-$version" && mv "$tmp" "$cache/hostpathplugin-$version"
    echo "peers: built hostpathplugin $version in $((SECONDS - start))s"
  fi
  ln -sfn "$out" "$bin/hostpathplugin"
}

build etcd "$ETCD_VERSION" etcd go.etcd.io/etcd/server/v3 -ldflags="-s -w"
[[ $mode == demo ]] || build csi-sanity "$SANITY_VERSION" csi github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity \
  -ldflags="-s -w -X main.VERSION=$SANITY_VERSION"
build kube-apiserver "$KUBE_VERSION" "$kube" k8s.io/kubernetes/cmd/kube-apiserver \
  -tags=selinux,notest -ldflags="$(kube_ldflags)"
build kube-controller-manager "$KUBE_VERSION" "$kube" k8s.io/kubernetes/cmd/kube-controller-manager \
  -tags=selinux,notest -ldflags="$(kube_ldflags)"
build_hostpath
if [[ $mode == demo ]]; then
  echo "peers: the demo's set ready in $bin"
  exit 0
fi

# The VolumeSnapshot CRDs of the same release, from the client module's config/crd.
snapshot_crds() {
  local out="$cache/snapshot-crds-$SNAPSHOTTER_VERSION"
  if [[ -f "$out/snapshot.storage.k8s.io_volumesnapshots.yaml" ]]; then
    echo "peers: snapshot CRDs $SNAPSHOTTER_VERSION cached at $out"
  else
    local dir
    dir=$(cd "$here/snapshotter" && go mod download -json "$SNAPSHOT_CLIENT" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    if [[ -z "$dir" || ! -d "$dir/config/crd" ]]; then
      echo "peers: cannot find config/crd of $SNAPSHOT_CLIENT" >&2
      exit 1
    fi
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    cp "$dir"/config/crd/snapshot.storage.k8s.io_*.yaml "$out.tmp/"
    rm -rf "$out" && mv "$out.tmp" "$out"
    echo "peers: snapshot CRDs $SNAPSHOTTER_VERSION copied to $out"
  fi
  ln -sfn "$out" "$bin/snapshot-crds"
}
snapshot_ldflags="-s -w -X main.version=$SNAPSHOTTER_VERSION"
build snapshot-controller "$SNAPSHOTTER_VERSION" snapshotter \
  github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller -ldflags="$snapshot_ldflags"
build csi-snapshotter "$SNAPSHOTTER_VERSION" snapshotter \
  github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter -ldflags="$snapshot_ldflags"
snapshot_crds

# The stack we replace: the uninstall test runs it (so `make test` needs it), and the side-by-side
# benchmark. Both report main.version in their logs and metrics; upstream's release builds set it.
build csi-provisioner "$PROVISIONER_VERSION" provisioner \
  github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner \
  -ldflags="-s -w -X main.version=$PROVISIONER_VERSION"
build csi-resizer "$RESIZER_VERSION" resizer \
  github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer \
  -ldflags="-s -w -X main.version=$RESIZER_VERSION"

# The node: kubelet and kube-scheduler of the same release, containerd (Debian's 1.6 is too old
# for kubelet 1.36) and the images every pod needs, built without a registry.
CONTAINERD_VERSION=$(pinned containerd github.com/containerd/containerd/v2)
build kubelet "$KUBE_VERSION" "$kube" k8s.io/kubernetes/cmd/kubelet -tags=selinux,notest -ldflags="$(kube_ldflags)"
build kube-scheduler "$KUBE_VERSION" "$kube" k8s.io/kubernetes/cmd/kube-scheduler -tags=selinux,notest -ldflags="$(kube_ldflags)"
containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
build containerd "$CONTAINERD_VERSION" containerd github.com/containerd/containerd/v2/cmd/containerd \
  -tags=no_btrfs -ldflags="$containerd_ldflags"
build containerd-shim-runc-v2 "$CONTAINERD_VERSION" containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 -ldflags="$containerd_ldflags"
build ctr "$CONTAINERD_VERSION" containerd github.com/containerd/containerd/v2/cmd/ctr \
  -ldflags="$containerd_ldflags"
# The registrar that announces the driver to kubelet (peers/registrar), keyed by its source.
build csi-pv-registrar "$(cat "$here/registrar/"*.go "$here/registrar/go.sum" | sha256sum | cut -c1-12)" \
  registrar . -ldflags="-s -w"
# Prometheus 2's own parser of a scrape (peers/promparse), for the metrics' golden test.
build promparse "$(cat "$here/promparse/"*.go "$here/promparse/go.sum" | sha256sum | cut -c1-12)" \
  promparse . -ldflags="-s -w"
# kubectl: `kubectl kustomize` of deploy/ in make test, and the e2e suite's commands.
build kubectl "$KUBE_VERSION" "$kube" k8s.io/kubernetes/cmd/kubectl -ldflags="$(kube_ldflags)"
# csi-attacher: a container of csi-driver-host-path's plugin pod, and the e2e suite's attacher.
build csi-attacher "$(pinned attacher github.com/kubernetes-csi/external-attacher/v4)" attacher \
  github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher -ldflags="-s -w -X main.version=$(pinned attacher github.com/kubernetes-csi/external-attacher/v4)"
if [[ $mode == gate || $mode == e2e ]]; then
  build ginkgo "$(pinned "$kube" github.com/onsi/ginkgo/v2)" "$kube" github.com/onsi/ginkgo/v2/ginkgo -ldflags="-s -w"
  # Kubernetes' storage e2e binary, the test package in k8s/e2e, keyed by the release and the
  # package's source.
  e2e_version="$KUBE_VERSION-$(cat "$here/$kube/e2e/"*.go | sha256sum | cut -c1-12)"
  # -vet=off: `go test -c` vets the package first, minutes of a cold build for nothing run.
  GO_BUILD="test -c -vet=off" build e2e.test "$e2e_version" "$kube" ./e2e -ldflags="$(kube_ldflags)"
fi
if [[ $mode == e2e ]]; then
  build agnhost "$KUBE_VERSION" "$kube" k8s.io/kubernetes/test/images/agnhost -ldflags="-s -w"
fi
"$here/images.sh" "$cache" "$KUBE_VERSION" "$mode" "$kube"
# csi-driver-host-path's deployment, its sidecars' RBAC and its pod's images (the swap tests).
"$here/driver-images.sh" "$cache"

echo "peers: ready in $bin"
