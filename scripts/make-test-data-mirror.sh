#!/usr/bin/env bash
# Builds a local mirror of the GitHub tarballs that scripts/fetch-test-data.sh needs, from git
# clones of the repositories, for machines that cannot reach GitHub:
#
#   scripts/make-test-data-mirror.sh MIRROR OWNER/REPO=GIT_DIR...
#   GRAMMASK_DATA_MIRROR=MIRROR scripts/fetch-test-data.sh
#
# e.g. scripts/make-test-data-mirror.sh /tmp/mirror ggml-org/llama.cpp=~/src/llama.cpp/.git ...
# (a bare repository or a clone's .git both work). The repositories and pinned commits are
# those that `scripts/fetch-test-data.sh --list-sources` prints; each must be given a GIT_DIR
# that holds its commit. Each tarball is written as MIRROR/<owner>/<repo>/tar.gz/<commit>,
# made with `git archive --prefix=<repo>-<commit>/`, the layout and top folder that GitHub's
# codeload serves for a commit (it too honours the repository's export-ignore attributes).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 2 ]; then
  echo "usage: $0 MIRROR OWNER/REPO=GIT_DIR..." >&2
  echo "needed (owner/repo commit):" >&2
  "$root/scripts/fetch-test-data.sh" --list-sources >&2
  exit 2
fi
mirror="$1"
shift
declare -A gitdir
for a in "$@"; do
  case "$a" in
    */*=*) gitdir["${a%%=*}"]="${a#*=}" ;;
    *) echo "error: '$a' is not OWNER/REPO=GIT_DIR" >&2; exit 2 ;;
  esac
done

tmpf="$(mktemp)"
trap 'rm -f "$tmpf"' EXIT
status=0
while read -r owner_repo commit; do
  repo="${owner_repo#*/}"
  d="${gitdir[$owner_repo]:-}"
  if [ -z "$d" ]; then
    echo "error: no GIT_DIR given for $owner_repo (needs commit $commit)" >&2
    status=1
    continue
  fi
  if ! git --git-dir="$d" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "error: $d does not hold $owner_repo commit $commit (fetch it, or a fuller clone)" >&2
    status=1
    continue
  fi
  # A partial or size-limited clone may lack some blobs; git archive would stop at the first.
  # Those paths are left out of the tarball (named here); the fetch script checks that each
  # file it needs is present and matches its sha256, so a needed one that is absent fails there.
  excludes=()
  git --git-dir="$d" ls-tree -r --format='%(objecttype)%x09%(objectname)%x09%(path)' "$commit" \
    | awk -F '\t' '$1 == "blob"' > "$tmpf"
  while IFS= read -r path; do
    echo "warning: $owner_repo@$commit: blob missing from $d, left out: $path" >&2
    excludes+=(":(exclude,literal)$path")
  done < <(cut -f2 "$tmpf" | git --git-dir="$d" cat-file --batch-check \
    | awk -F '\t' 'NR == FNR { if ($0 ~ / missing$/) { split($0, w, " "); gone[w[1]] = 1 }; next }
                   $2 in gone { print $3 }' - "$tmpf")
  out="$mirror/$owner_repo/tar.gz/$commit"
  mkdir -p "$(dirname "$out")"
  # With excludes, git (2.47) still prints one "error: invalid object ..." for the first missing
  # blob but exits 0 and writes every other file; a real failure exits non-zero and stops here.
  if [ ${#excludes[@]} -gt 0 ]; then
    git --git-dir="$d" archive --format=tar.gz --prefix="$repo-$commit/" -o "$out.part" "$commit" -- . "${excludes[@]}"
  else
    git --git-dir="$d" archive --format=tar.gz --prefix="$repo-$commit/" -o "$out.part" "$commit"
  fi
  mv "$out.part" "$out"
  echo "$out ($(du -h "$out" | cut -f1))"
done < <("$root/scripts/fetch-test-data.sh" --list-sources)
exit "$status"
