#!/usr/bin/env bash
# How old the newest committed full `make e2e` is: the commits since it that touched src/, from
# the commit each results folder's provenance.md names. `.ci/run` prints it; `make e2e-age` too.
# Exits 0 whatever the age: the rule (rerun before an issue that changed src/ is resolved) is
# kept by people, and this line tells them where it stands.
set -euo pipefail
cd "$(dirname "$0")/../.."
best="" best_count="" best_commit=""
for provenance in tests/e2e/results/*/provenance.md; do
  commit=$(sed -n 's/^- commit: \([0-9a-f]\{40\}\).*/\1/p' "$provenance" | head -n1)
  [[ -n $commit ]] && git cat-file -e "$commit^{commit}" 2>/dev/null || continue
  git merge-base --is-ancestor "$commit" HEAD || continue
  count=$(git rev-list --count "$commit..HEAD" -- src)
  if [[ -z $best_count ]] || ((count < best_count)); then
    best=$(dirname "$provenance") best_count=$count best_commit=$commit
  fi
done
if [[ -z $best ]]; then
  echo "e2e age: no committed full run names a commit of this history"
else
  echo "e2e age: the newest full run ($best, at ${best_commit:0:7}) is $best_count commit(s) touching src/ behind HEAD"
fi
