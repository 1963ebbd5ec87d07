#!/bin/bash
# build_stage.sh: a decode stage (what `make decode-stage` copies: fi-bench, fi-cache, the
# library, gpu_decode) of any commit with patches applied, for lab/gpu/decode_stages.sh.
#
# usage (here, not on the GPU machine): lab/gpu/build_stage.sh DEST REV [PATCH...]
#   DEST   the stage's folder (replaced), e.g. build/stages/widen; carry build/stages
#   REV    the commit (HEAD, a hash, a branch)
#   PATCH  applied in order with `git apply` (e.g. lab/gpu/patches/*.patch)
# The build runs in a scratch worktree of REV, removed afterwards; DEST/STAGE says what
# was built (commit, patches, and whether the working tree's own changes are left out:
# they are; commit or stash them into a patch first). The repository is the script's own,
# wherever it is run from; DEST and PATCH are relative to the current folder.
set -eu
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
DEST=$1
REV=$2
shift 2
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
patches=()
for p in "$@"; do
  [ -f "$p" ] || { echo "build_stage.sh: no patch $p" >&2; exit 2; }
  patches+=("$(realpath "$p")")
done
commit=$(git -C "$root" rev-parse --verify -q "$REV^{commit}") || { echo "build_stage.sh: no commit $REV" >&2; exit 2; }
# A stage of HEAD's commit names the tracked files changed in the working tree (not in it),
# lest it pass for a build of them.
dirty=
if [ "$commit" = "$(git -C "$root" rev-parse HEAD)" ]; then
  dirty=$(git -C "$root" status --porcelain --untracked-files=no | cut -c4- | tr '\n' ' ' | sed 's/ $//')
fi
wt=$(mktemp -d /tmp/fi-stage.XXXXXX)
log=$wt.log
cleanup() { git -C "$root" worktree remove --force "$wt" > /dev/null 2>&1 || rm -rf "$wt"; }
trap cleanup EXIT
git -C "$root" worktree add -q --detach "$wt" "$commit"
for p in ${patches[@]+"${patches[@]}"}; do
  git -C "$wt" apply "$p" || { echo "build_stage.sh: $p does not apply to $REV" >&2; exit 1; }
done
# BUILD and SAN fixed on the command line, over the environment's: the copy below reads
# build/decode-stage, and a sanitizer build is no stage to time.
if ! make -C "$wt" -j"$(nproc)" BUILD=build SAN= decode-stage > "$log" 2>&1; then
  tail -30 "$log" >&2
  echo "build_stage.sh: the build failed (log: $log)" >&2
  exit 1
fi
rm -f "$log"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
cp -r "$wt/build/decode-stage" "$DEST"
{
  echo "commit $(git -C "$root" rev-parse --short "$commit") ($REV)"
  for p in ${patches[@]+"${patches[@]}"}; do echo "patch $(basename "$p")"; done
  [ -z "$dirty" ] || echo "left out: uncommitted changes to $dirty"
} > "$DEST/STAGE"
echo "build_stage.sh: $DEST: $(tr '\n' ' ' < "$DEST/STAGE")"
