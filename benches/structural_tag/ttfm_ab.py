#!/usr/bin/env python3
"""Time to first mask of two (or more) `grammask` binaries, alternating run by run, on the
20-tool tags of tools_sitting.py: this machine's noise moves whole runs by ±30 %, so only
binaries run in alternation, many times, compare.

    python3 benches/structural_tag/ttfm_ab.py --rounds 10 /tmp/grammask_before target/release/grammask
    python3 benches/structural_tag/ttfm_ab.py --rounds 5 --turn --background --step-us 100 A B

Each run is `grammask bench --repeats R` (a fresh compile per repeat) on a 5-character
text (the compile and the first fill alone), or with `--turn` on the sitting's agent turn
(each compile then follows a walk of the previous repeat, as in the sitting). Printed per
binary and tag: the median over runs of each run's ttfm p50, the lowest and quartiles,
and with `--turn` the cold per-token mean and p99 (medians over runs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tools_sitting as ts  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=None, help="per run (default 40, 10 with --turn)")
    ap.add_argument("--turn", action="store_true", help="walk the sitting's agent turn after each compile")
    ap.add_argument("--background", action="store_true")
    ap.add_argument("--step-us", type=int, default=0)
    ap.add_argument("--tools", type=int, default=20)
    args = ap.parse_args()
    repeats = args.repeats or (10 if args.turn else 40)
    tmp = tempfile.mkdtemp(prefix="ttfm_ab_")
    tools = ts.glaive_tools(args.tools)
    tools_file = os.path.join(tmp, "tools.json")
    with open(tools_file, "w", encoding="utf-8") as fh:
        json.dump([t for t, _ in tools], fh)
    short = os.path.join(tmp, "short.txt")
    with open(short, "w", encoding="utf-8") as fh:
        fh.write("Hello")
    extra = ["--step-us", str(args.step_us)] + (["--background"] if args.background else [])
    for family, tok in ts.SETUPS:
        tag = subprocess.run([args.binaries[-1], "tools", "preset", "--family", family, "--tools", tools_file],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        tag_file = os.path.join(tmp, f"{family}.json")
        with open(tag_file, "w", encoding="utf-8") as fh:
            fh.write(tag)
        text = short
        if args.turn:
            n = args.tools
            picks = sorted({0, n // 2, n - 1})[: 1 + n // 10 + 1]
            calls = [(tools[i][0]["function"]["name"], tools[i][1]) for i in picks]
            text = os.path.join(tmp, f"{family}_turn.txt")
            with open(text, "w", encoding="utf-8") as fh:
                fh.write(ts.transcript(family, calls, True))
        runs = {b: [] for b in args.binaries}
        for _ in range(args.rounds):
            for b in args.binaries:
                out = subprocess.run([b, "bench", "--tokenizer", os.path.join(ts.TOKENIZERS, tok),
                                      "--structural-tag", tag_file, "--text-file", text,
                                      "--repeats", str(repeats)] + extra,
                                     stdout=subprocess.PIPE, text=True, check=True).stdout
                runs[b].append(json.loads(out.strip().splitlines()[-1]))
        for b in args.binaries:
            t = sorted(r["ttfm_us"]["p50"] for r in runs[b])
            q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
            line = (f"{family}_{args.tools} ({tok}) {b}: ttfm p50 per run: median {statistics.median(t):,.0f} µs, "
                    f"lowest {t[0]:,.0f}, quartiles {q(0.25):,.0f}–{q(0.75):,.0f}")
            if args.turn:
                mean = statistics.median(r["per_token_us_cold"]["mean"] for r in runs[b])
                p99 = statistics.median(r["per_token_us_cold"]["p99"] for r in runs[b])
                line += f"; cold per-token mean {mean:.2f} µs, p99 {p99:.1f} µs"
            print(line, flush=True)


if __name__ == "__main__":
    main()
