#!/usr/bin/env python3
"""Run grammar_bench.py over the standard grammar/text pairs and print a table.

    python3 benches/peers/run_all.py [--repeats 5] [--out results.jsonl]
                                     [--tokenizer PATH] [--only json,c]

Pairs: builtin JSON + benches/texts/json.txt, and the llama.cpp grammars
json, c, chess, list, arithmetic with benches/texts/<name>.txt.  Each pair runs
in its own process (cold start).  Every JSON line of grammar_bench.py is copied
to --out (JSON lines), then a Markdown table is printed on stdout.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GRAMMARS = os.environ.get("GRAMMASK_GRAMMARS", "/work/shared/data/grammars/llama.cpp")
TEXTS = os.path.join(ROOT, "benches", "texts")
PAIRS = [("builtin-json", None, "json"), ("json", "json", "json"), ("c", "c", "c"),
         ("chess", "chess", "chess"), ("list", "list", "list"),
         ("arithmetic", "arithmetic", "arithmetic")]


def fmt(x, digits=1):
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", "-r", type=int, default=5)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--out", default=None, help="append result JSON lines here")
    ap.add_argument("--only", default=None, help="comma list of pair names")
    ap.add_argument("--engines", default="xgrammar,llguidance")
    args = ap.parse_args()

    only = set(args.only.split(",")) if args.only else None
    results = []
    out = open(args.out, "a", encoding="utf-8") if args.out else None
    for name, grammar, text in PAIRS:
        if only and name not in only:
            continue
        cmd = [sys.executable, os.path.join(HERE, "grammar_bench.py"),
               "--text", os.path.join(TEXTS, text + ".txt"), "-r", str(args.repeats),
               "--engines", args.engines]
        if grammar is None:
            cmd.append("--builtin-json")
        else:
            cmd += ["--grammar", os.path.join(GRAMMARS, grammar + ".gbnf")]
        if args.tokenizer:
            cmd += ["--tokenizer", args.tokenizer]
        print(f"# {' '.join(cmd)}", file=sys.stderr, flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        for line in p.stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            results.append(r)
            if out:
                out.write(line + "\n")
                out.flush()
            print(f"#   {r['engine']}: ok={r['ok']} mean {r['per_token_us']['mean']} µs",
                  file=sys.stderr, flush=True)
    if out:
        out.close()

    print("| grammar | engine | tokens | ttfm p50 ms | per-token mean µs | p50 | p90 | p99 | max "
          "| fill mean | accept mean | memory KiB | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        pt = r["per_token_us"]
        ttfm = r["ttfm_us"]["p50"]
        mem = r.get("memory_bytes")
        print(f"| {r['grammar']} | {r['engine']} {r.get('version', '')} | {r['tokens']} "
              f"| {fmt(ttfm / 1000.0 if ttfm is not None else None, 2)} "
              f"| {fmt(pt['mean'])} | {fmt(pt['p50'])} | {fmt(pt['p90'])} | {fmt(pt['p99'])} "
              f"| {fmt(pt['max'])} | {fmt(r['fill_us']['mean'])} | {fmt(r['accept_us']['mean'])} "
              f"| {fmt(mem / 1024.0 if mem is not None else None, 0)} | {'yes' if r['ok'] else 'NO'} |")


if __name__ == "__main__":
    main()
