#!/usr/bin/env bash
# `make range`: the integration suite and the e2e gate on another Kubernetes release's peers
# (peers/$1, e.g. k8s-1.35, built with PEERS_KUBE=$1 peers/build.sh gate), the rest of the set
# as pinned. What ran, where and how it ended goes to tests/range/results/<version>/: the
# release, the commit, the image digest, each test binary's result line and the gate's report.
# Exits non-zero when any of it failed, after writing the results.
set -uo pipefail

kube=${1:?usage: tests/range/run.sh PEERS_MODULE (e.g. k8s-1.35)}
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${PEERS_CACHE:?PEERS_CACHE is set by the Makefile}
bin=$cache/bin-$kube
[[ -x $bin/kube-apiserver ]] || { echo "range: no peers in $bin: run PEERS_KUBE=$kube peers/build.sh gate" >&2; exit 2; }
version=$("$bin/kube-apiserver" --version | awk '{print $2}')
out=$root/tests/range/results/$version
log=$root/target/range-$version
rm -rf "$out" "$log" && mkdir -p "$out" "$log"

# RANGE_PARTS narrows what runs (e.g. RANGE_PARTS=integration); the results say what did not run.
parts=${RANGE_PARTS:-integration e2e-gate}
status=0
for part in $parts; do
  case $part in
    integration | e2e-gate) ;;
    *) echo "range: unknown part $part (integration, e2e-gate)" >&2; exit 2 ;;
  esac
  make -C "$root" --no-print-directory PEERS_KUBE="$kube" PEERS_BIN="$bin" "$part" >"$log/$part.log" 2>&1 || status=1
done
ran() { [[ " $parts " == *" $1 "* ]]; }

{
  echo "# Kubernetes $version: $(ran integration && ran e2e-gate && echo "the integration suite and the e2e gate" || echo "$parts only")"
  echo
  echo "- commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- src tests Cargo.toml Cargo.lock || echo ' (with changes not committed)')"
  echo "- peers: kube-apiserver, kube-controller-manager, kubelet, kube-scheduler, kubectl and e2e.test $version (peers/$kube); the rest as peers/ pins them"
  echo "- outcome: $([[ $status == 0 ]] && echo passed || echo FAILED)"
  echo
  echo "## Integration tests (make integration), one line per test binary"
  echo
  echo '```'
  ran integration || echo "not run here (RANGE_PARTS=$parts)"
  cat "$log"/integration.log 2>/dev/null | grep -E '^\s+Running |^test result:'  | sed -E 's/^\s+Running (tests\/[^ ]+).*/\1/' |
    paste - - | sed -E 's/; finished in .*//'
  echo '```'
  echo
  echo "## The e2e gate (make e2e-gate)"
  echo
  ran e2e-gate || echo "Not run here (RANGE_PARTS=$parts)."
  ran e2e-gate && for f in "$root"/target/e2e-gate/provenance.md "$root"/target/e2e-gate/results-*.md; do
    [[ -f $f ]] && cat "$f" && echo
  done
  failed=$(cat "$log"/integration.log 2>/dev/null | grep -E '^failures:|^---- .* stdout ----'  | sed -n 's/^---- \(.*\) stdout ----/\1/p' | sort -u)
  if [[ -n $failed ]]; then
    echo "## Failed"
    echo
    echo "$failed" | sed 's/^/- /'
  fi
} >"$out/README.md"
cat "$out/README.md"
exit $status
