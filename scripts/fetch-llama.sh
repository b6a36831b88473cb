#!/usr/bin/env bash
# Fetches the pinned llama.cpp source into third_party/_deps/llama.cpp.
#
# The source comes from the npm package node-llama-cpp@3.22.1, whose llama/gitRelease.bundle is a
# git bundle of llama.cpp at the release it was built against. The tarball's sha512 is pinned
# below and checked before anything is extracted; the clone is checked out at LLAMA_COMMIT and
# verified. Idempotent: does nothing when the checkout is already at that commit.
# Needs: npm, git, tar and coreutils (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_PACKAGE="node-llama-cpp@3.22.1"
# `npm view node-llama-cpp@3.22.1 dist.integrity`
NPM_INTEGRITY="sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw=="
LLAMA_COMMIT_PREFIX="de3ff81"
DEST="third_party/_deps/llama.cpp"

if [[ -d "$DEST/.git" ]]; then
  head=$(git -C "$DEST" rev-parse HEAD 2>/dev/null || true)
  if [[ "$head" == "$LLAMA_COMMIT_PREFIX"* ]]; then
    echo "fetch-llama: $DEST already at $head"
    exit 0
  fi
  echo "fetch-llama: $DEST is at '${head:-?}', not $LLAMA_COMMIT_PREFIX; re-fetching"
  rm -rf "$DEST"
fi

for tool in npm git tar sha512sum base64 od; do
  command -v "$tool" >/dev/null || { echo "fetch-llama: '$tool' not found (run scripts/install-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work" "$DEST.tmp"' EXIT
rm -rf "$DEST.tmp"  # left by an interrupted run
echo "fetch-llama: npm pack $NPM_PACKAGE"
(cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null)
tarball=$(ls "$work"/node-llama-cpp-*.tgz)

expected_hex=$(printf '%s' "${NPM_INTEGRITY#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
actual_hex=$(sha512sum "$tarball" | cut -d' ' -f1)
if [[ "$actual_hex" != "$expected_hex" ]]; then
  echo "fetch-llama: integrity mismatch for $NPM_PACKAGE" >&2
  echo "  expected sha512 $expected_hex" >&2
  echo "  actual   sha512 $actual_hex" >&2
  exit 1
fi

tar -xzf "$tarball" -C "$work" package/llama/gitRelease.bundle
mkdir -p "$(dirname "$DEST")"
git -c advice.detachedHead=false clone --quiet "$work/package/llama/gitRelease.bundle" "$DEST.tmp"
commit=$(git -C "$DEST.tmp" rev-parse "$LLAMA_COMMIT_PREFIX^{commit}")
git -C "$DEST.tmp" -c advice.detachedHead=false checkout --quiet "$commit"
if [[ "$(git -C "$DEST.tmp" rev-parse HEAD)" != "$LLAMA_COMMIT_PREFIX"* ]]; then
  echo "fetch-llama: checkout is not at $LLAMA_COMMIT_PREFIX" >&2
  exit 1
fi
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "fetch-llama: $DEST at $commit"
