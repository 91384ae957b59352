#!/usr/bin/env bash
# csi-driver-host-path's deployment as its users apply it, made available offline: the
# deploy/kubernetes-1.34 folder of its source archive, the Go sidecars' own RBAC from their module
# sources, and one image per container of its plugin StatefulSet, saved as a docker archive under
# the exact name the manifest asks for, so that kubelet finds each present and pulls nothing.
#   hostpath, csi-attacher, csi-provisioner, csi-resizer, csi-snapshotter
#       the binaries built by peers/build.sh, each on the busybox root (hostpathplugin execs
#       mount, umount and losetup; the sidecars run from a bare root upstream, and a shell does
#       not change them), entrypoint /<program> as upstream's images
#   node-driver-registrar, liveness-probe, csi-external-health-monitor-controller
#       test-only stand-ins (peers/registrar/standins.go): the Go module proxy does not serve
#       their sources
# An image's version label names what is inside when it differs from the manifest's tag.
# Called by peers/build.sh after images.sh; cached by the inputs' versions.
# Usage: peers/driver-images.sh CACHE
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=$1
bin=${PEERS_BIN_DIR:-$cache/bin}

hostpath_version=$(sed -n 's/^version=//p' "$here/hostpath/source")
archive=${PEER_SOURCES:-$here/../../shared/peers}/$(sed -n 's/^archive=//p' "$here/hostpath/source")

# The driver's deployment folder, the sidecars' RBAC and csi-provisioner's and csi-resizer's own
# deployment manifests, once per hostpath release and set of sidecar versions.
version_of() { sed -n "s#^[[:space:]]*$2 \(v[^ ]*\).*#\1#p" "$here/$1/go.mod" | head -n1; }
sidecars=$(for p in "provisioner external-provisioner/v6" "resizer external-resizer/v2" \
  "attacher external-attacher/v4" "snapshotter external-snapshotter/v8"; do
  set -- $p; version_of "$1" "github.com/kubernetes-csi/$2"; done | tr '\n' '-')
deploy="$cache/hostpath-deploy-$hostpath_version-${sidecars%-}"
if [[ ! -f $deploy/sidecars/csi-resizer.yaml ]]; then
  echo "peers: copying csi-driver-host-path $hostpath_version's deployment and its sidecars' RBAC"
  rm -rf "$deploy.tmp" && mkdir -p "$deploy.tmp/rbac" "$deploy.tmp/sidecars"
  tar xzf "$archive" -C "$deploy.tmp" --strip-components=2 \
    "csi-driver-host-path-$hostpath_version/deploy/kubernetes-1.34" \
    "csi-driver-host-path-$hostpath_version/deploy/util"
  module_dir() { (cd "$here/$1" && go mod download -json "$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }
  # copy_from PEER MODULE PATH DEST: a file of the module's source as peers/PEER pins it.
  copy_from() {
    local peer=$1 module=$2 path=$3 dest=$4 dir
    dir=$(module_dir "$peer" "$module@$(version_of "$peer" "$module")")
    [[ -f $dir/$path ]] || { echo "peers: $module has no $path" >&2; exit 1; }
    cp "$dir/$path" "$dest"
  }
  rbac() { copy_from "$2" "$3" "$4" "$deploy.tmp/rbac/$1.yaml"; }
  rbac csi-provisioner provisioner github.com/kubernetes-csi/external-provisioner/v6 deploy/kubernetes/rbac.yaml
  rbac csi-resizer resizer github.com/kubernetes-csi/external-resizer/v2 deploy/kubernetes/rbac.yaml
  rbac csi-attacher attacher github.com/kubernetes-csi/external-attacher/v4 deploy/kubernetes/rbac.yaml
  rbac csi-snapshotter snapshotter github.com/kubernetes-csi/external-snapshotter/v8 \
    deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml
  # Each sidecar's own example deployment: its args, verbatim, start ours (tests/sidecar.rs).
  copy_from provisioner github.com/kubernetes-csi/external-provisioner/v6 deploy/kubernetes/deployment.yaml \
    "$deploy.tmp/sidecars/csi-provisioner.yaml"
  copy_from resizer github.com/kubernetes-csi/external-resizer/v2 deploy/kubernetes/deployment.yaml \
    "$deploy.tmp/sidecars/csi-resizer.yaml"
  rm -rf "$deploy" && mv "$deploy.tmp" "$deploy"
fi
ln -sfn "$deploy" "$bin/hostpath-deploy"
manifest=$deploy/kubernetes-1.34/hostpath/csi-hostpath-plugin.yaml

# The image the manifest names for a container.
image_of() {
  awk -v want="$1" '$1 == "-" && $2 == "name:" { name = $3 } $1 == "image:" && name == want { print $2; exit }' "$manifest"
}

key=$(
  {
    cat "$0" "$here/images.sh"
    for p in hostpathplugin csi-attacher csi-provisioner csi-resizer csi-snapshotter csi-pv-registrar; do
      readlink "$bin/$p"
    done
  } | sha256sum | cut -c1-12
)
out="$cache/driver-images-$key"
if [[ -f $out/done ]]; then
  echo "peers: driver images cached at $out"
  ln -sfn "$out" "$bin/driver-images"
  exit 0
fi

bah() { buildah --storage-driver vfs "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out.tmp" && mkdir -p "$out.tmp"

# The busybox root of images.sh, unpacked from its archive.
mkdir -p "$work/busybox"
tar -xf "$bin/images/busybox.tar" -C "$work" 
layer=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["Layers"][0])' "$work/manifest.json")
tar -xf "$work/$layer" -C "$work/busybox"

# container PROGRAM VERSION [ENTRYPOINT NAME]: the image for CONTAINER with PROGRAM at
# /ENTRYPOINT NAME (PROGRAM's own name by default).
container() {
  local container=$1 program=$2 version=$3 entry=${4:-$(basename "$2")}
  local name root=$work/root-$container c
  name=$(image_of "$container")
  [[ -n $name ]] || { echo "peers: $manifest has no container $container" >&2; exit 1; }
  rm -rf "$root" && cp -a "$work/busybox" "$root"
  cp "$program" "$root/$entry"
  c=$(bah from --name "driver-image-$$" scratch)
  bah copy "$c" "$root" / >/dev/null
  bah config --entrypoint "[\"/$entry\"]" --cmd '[]' \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.description=built by peers/driver-images.sh for tests" "$c"
  bah commit --rm -q "$c" "$name" >/dev/null
  bah push -q "$name" "docker-archive:$out.tmp/$container.tar:$name"
  bah rmi -f "$name" >/dev/null
  rm -rf "$root"
  echo "peers: $name ($container) holds $(basename "$program") $version"
}

version() { basename "$(dirname "$(readlink "$bin/$1")")" | sed "s/^$1-//"; }
container hostpath "$bin/hostpathplugin" "$(version hostpathplugin)"
container csi-attacher "$bin/csi-attacher" "$(version csi-attacher)"
container csi-provisioner "$bin/csi-provisioner" "$(version csi-provisioner)"
container csi-resizer "$bin/csi-resizer" "$(version csi-resizer)"
container csi-snapshotter "$bin/csi-snapshotter" "$(version csi-snapshotter)"
standin=$(readlink "$bin/csi-pv-registrar")
container node-driver-registrar "$standin" "test-only stand-in" csi-node-driver-registrar
container liveness-probe "$standin" "test-only stand-in" livenessprobe
container csi-external-health-monitor-controller "$standin" "test-only stand-in" csi-external-health-monitor-controller

touch "$out.tmp/done"
# Earlier builds' images are of no further use.
find "$cache" -maxdepth 1 -name "driver-images-*" ! -name "driver-images-$key*" -exec rm -rf {} +
rm -rf "$out" && mv "$out.tmp" "$out"
ln -sfn "$out" "$bin/driver-images"
echo "peers: driver images in $out"
