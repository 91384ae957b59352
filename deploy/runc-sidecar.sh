#!/usr/bin/env bash
# Runs the unpacked amd64 image (target/image-unpacked/amd64, left by image-check.sh) as a
# container under runc, with the arguments given here after the image's own entrypoint: a
# stand-in for the binary that the demo (SIDECAR_BIN) starts, so the demo's whole lifecycle runs
# against the image as a runtime starts it.
#
# What a pod gives the sidecar is given the same way: the pod's network (here the host's, where
# kube-apiserver listens), the driver's socket folder and the kubeconfig's folder mounted at the
# paths the flags name, the image's user, a read-only root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$here/target/image-unpacked/amd64
config_blob=$here/target/image-unpacked/amd64.config.json
[ -x "$root/csi-pv-controller" ] || { echo "runc-sidecar: no unpacked image at $root: run image-check.sh" >&2; exit 1; }
[ -f "$config_blob" ] || { echo "runc-sidecar: no image config at $config_blob" >&2; exit 1; }
# One bundle per run under target/runc-bundles/ (the Makefile removes them, and any container
# left by a run that was killed).
id=csi-pv-controller-run-$$
bundle=$here/target/runc-bundles/$id
rm -rf "$bundle" && mkdir -p "$bundle"
(cd "$bundle" && runc spec)

# Folders to mount: those of the socket and the kubeconfig (the kubeconfig's certificates live
# beside it), where they exist: a socket folder that does not exist holds no socket.
mounts=()
for arg in "$@"; do
  case "$arg" in
    --csi-address=*) path=${arg#--csi-address=}; path=${path#unix://} ;;
    --kubeconfig=*) path=${arg#--kubeconfig=} ;;
    *) continue ;;
  esac
  if [ -d "$(dirname "$path")" ]; then mounts+=("$(dirname "$path")"); fi
done
mounts_json=$(printf '%s\n' "${mounts[@]}" | sort -u | jq -R 'select(length > 0) | {destination: ., source: ., type: "bind", options: ["rbind", "rw"]}' | jq -sc .)
args_json=$(jq -c --argjson extra "$(printf '%s\n' "$@" | jq -R . | jq -sc 'map(select(length > 0))')" '.config.Entrypoint + $extra' "$config_blob")
env_json=$(for name in RUST_LOG HOSTNAME POD_NAME POD_NAMESPACE NODE_NAME; do
  if [ -n "${!name:-}" ]; then printf '%s=%s\n' "$name" "${!name}"; fi
done | jq -R . | jq -sc --slurpfile image "$config_blob" '($image[0].config.Env // []) + .')
user=$(jq -r '.config.User' "$config_blob")
jq --arg root "$root" --argjson args "$args_json" --argjson env "$env_json" --argjson mounts "$mounts_json" \
  --argjson uid "${user%%:*}" --argjson gid "${user##*:}" '
  .root = {path: $root, readonly: true}
  | .process.args = $args | .process.env = $env | .process.terminal = false
  | .process.user = {uid: $uid, gid: $gid}
  | .linux.namespaces |= map(select(.type != "network"))
  | .mounts += $mounts' "$bundle/config.json" > "$bundle/config.next"
mv "$bundle/config.next" "$bundle/config.json"
# runc in the foreground: it hands the signals it gets on to the process, ends with its exit
# code, and deletes the container.
exec runc run --bundle "$bundle" "$id"
