#!/usr/bin/env bash
# Prepares a run on a GPU machine that has CUDA, PyTorch and Python 3.12 but no
# Rust toolchain and no package index (the project's lent H100/H200 machines):
#
#   * builds bench_bitmask and the GPU test binaries (gpu_props, nvrtc_ptx) here,
#     for x86-64, and copies them without debug info to .gpubin/ under stable names;
#   * the router's step benchmark (bench_step) and its CUDA test binary
#     (router_cuda), with what bench_step reads from ../shared (the Llama 3.1
#     tokenizer and the first 80 Github_easy dev schemas) in .gpubin/data/;
#   * downloads XGrammar 0.2.8 and the Python packages it needs that the GPU image
#     lacks (pydantic, pydantic-core, annotated-types, typing-inspection,
#     typing-extensions, apache-tvm-ffi) as CPython 3.12 manylinux wheels into
#     .whl/ (about 7 MB). The versions are pinned so that pydantic and
#     pydantic-core match; set SKIP_WHEELS=1 to leave .whl/ alone.
#
# Both folders go to .git/info/exclude, so they are never committed; name them in
# the device run's `carry`. Run from anywhere inside the repository; cargo honours
# CARGO_TARGET_DIR. See gpu/README.md ("Running on a GPU machine").
set -euo pipefail

root=$(git rev-parse --show-toplevel)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for d in /.gpubin/ /.whl/; do
  grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >>"$exclude"
done

target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p .gpubin
cargo build --release -p grammask-gpu --bin bench_bitmask
# Without debug info (the release profile keeps line tables): ~1.5 MB instead of
# ~40 MB each, well inside the device run's 64 MiB for everything carried.
strip --strip-debug -o .gpubin/bench_bitmask "$target/release/bench_bitmask"
# The path of test target $2 of package $1 (it carries a hash), from cargo's JSON
# messages (which also list the package's binaries: pick the test by name and kind).
test_exe() {
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json |
    python3 -c 'import json, sys
name = sys.argv[1]
exes = [m["executable"] for m in map(json.loads, sys.stdin)
        if m.get("executable") and m["target"]["name"] == name and "test" in m["target"]["kind"]]
print(exes[-1])' "$2"
}
for t in gpu_props nvrtc_ptx; do
  strip --strip-debug -o ".gpubin/$t" "$(test_exe grammask-gpu "$t")"
done

cargo build --release -p grammask-router --bin bench_step
strip --strip-debug -o .gpubin/bench_step "$target/release/bench_step"
strip --strip-debug -o .gpubin/router_cuda "$(test_exe grammask-router cuda)"
shared=${SHARED_DATA:-$root/../shared/data}
if [ -d "$shared" ]; then
  mkdir -p .gpubin/data/llama3_1 .gpubin/data/Github_easy
  cp "$shared/tokenizers/llama3_1/tokenizer.json" .gpubin/data/llama3_1/
  find "$shared/jsonschemabench/dev/Github_easy" -name '*.json' | sort | head -80 |
    xargs -I{} cp {} .gpubin/data/Github_easy/
fi

if [ "${SKIP_WHEELS:-0}" != 1 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    xgrammar==0.2.8 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
    typing-inspection==0.4.5 typing-extensions==4.16.0 apache-tvm-ffi==0.1.15.post2
fi
ls -la .gpubin .whl 2>/dev/null || true
du -sh .gpubin .whl 2>/dev/null || true
