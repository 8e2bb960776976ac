#!/usr/bin/env python3
"""One sitting: grammask and the peers (XGrammar, llguidance) on the same grammar/text pairs,
interleaved pair by pair so machine noise hits all engines alike. Prints a Markdown table.

    cargo build --release -p grammask
    python3 benches/grammar_sitting.py [--repeats 5] [--out /tmp/sitting.jsonl]

grammask is reported twice: "cold" (fresh compile each repeat; state masks computed lazily
while walking, so their cost is inside the per-token times) and "warm" (the same compiled
grammar walked again: every visited state cached, as after XGrammar's compile or a
compile-cache hit). Peers: XGrammar precomputes at compile (per-token = warm), llguidance
has no mask cache (per-token = its steady state).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "data"))
GRAMMARS = os.path.join(SHARED, "grammars", "llama.cpp")
TEXTS = os.path.join(HERE, "texts")
PAIRS = [("builtin-json", None, "json"), ("json", "json", "json"), ("c", "c", "c"),
         ("chess", "chess", "chess"), ("list", "list", "list"), ("arithmetic", "arithmetic", "arithmetic")]


def run_json_lines(cmd):
    print("# " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, RAYON_NUM_THREADS="1"))
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip().startswith("{")]


def f(x, d=1):
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 1000 else f"{x:.{d}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", "-r", type=int, default=5)
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "tokenizers", "llama3_1"))
    ap.add_argument("--out")
    args = ap.parse_args()
    exe = os.path.join(ROOT, "target", "release", "grammask")
    rows = []
    for name, grammar, text in PAIRS:
        gargs = ["--builtin-json"] if grammar is None else ["--grammar", os.path.join(GRAMMARS, grammar + ".gbnf")]
        textf = os.path.join(TEXTS, text + ".txt")
        ours = run_json_lines([exe, "bench", "--tokenizer", args.tokenizer, *gargs, "--text-file", textf,
                               "--repeats", str(args.repeats)])
        peers = run_json_lines([sys.executable, os.path.join(HERE, "peers", "grammar_bench.py"), "--tokenizer",
                                args.tokenizer, *gargs, "--text", textf, "-r", str(args.repeats)])
        for r in ours:
            rows.append((name, "grammask cold", r["tokens"], r["ttfm_us"]["p50"], r["per_token_us_cold"],
                         r["memory_bytes_visited"], r))
            rows.append((name, "grammask warm", r["tokens"], None, r["per_token_us_warm"],
                         r["memory_bytes_all_states"], r))
        for r in peers:
            rows.append((name, f"{r['engine']} {r.get('version', '')}".strip(), r["tokens"], r["ttfm_us"]["p50"],
                         r["per_token_us"], r.get("memory_bytes"), r))
        if args.out:
            with open(args.out, "a") as o:
                for r in ours + peers:
                    o.write(json.dumps(dict(r, pair=name)) + "\n")
    print("| grammar | engine | tokens | time to first mask p50 (ms) | per-token mean (µs) | p50 | p90 | p99 | max | cache memory (KiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, eng, toks, ttfm, pt, mem, _ in rows:
        print(f"| {name} | {eng} | {toks} | {f(ttfm / 1000 if ttfm is not None else None, 2)} | {f(pt['mean'])} | "
              f"{f(pt['p50'])} | {f(pt['p90'])} | {f(pt['p99'])} | {f(pt['max'])} | "
              f"{f(mem / 1024 if mem is not None else None, 0)} |")


if __name__ == "__main__":
    main()
