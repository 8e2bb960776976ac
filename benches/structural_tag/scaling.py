#!/usr/bin/env python3
"""Tool lists of 8 to 512 tools: time to first mask of the `qwen_3` tool-calling tag,
grammask against XGrammar 0.2.8 in one sitting (issue 48: it must grow at most linearly,
512 tools <= 25 ms).

    cargo build --release -p grammask --features cli --bin grammask
    python3 benches/structural_tag/scaling.py [--repeats 5] [--sizes 8,32,128,512] [--no-peer]

The tool lists are synthetic, seeded, written to a temporary folder: tool i has 2-7
arguments, each a string, an integer with bounds, an enum of 2-6 values, an array of
strings with maxItems, a date-time or a pattern (`^[A-Z]{2}-<i>[0-9]{3,6}$`); about 60 %
required. Each tag is written by `grammask tools preset --family qwen_3` and given to both
engines from the same file, with the Qwen3 tokenizer. The transcript closes the reasoning
block, writes a sentence and calls the first tool (arguments valid under its schema).

grammask is timed by `grammask bench` (a fresh compile per repeat, single thread), XGrammar
by benches/peers/grammar_bench.py (`max_threads=1`, no cache; its figures include one
Python call). Prints one JSON line per (engine, size) and a markdown table of time to first
mask p50 with the growth from the previous size.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TOKENIZER = os.path.abspath(os.path.join(ROOT, "..", "shared", "data", "tokenizers", "qwen3"))
KINDS = ["string", "integer", "enum", "array", "datetime", "pattern"]

sys.path.insert(0, os.path.join(ROOT, "benches"))
from grammar_sitting import run_json_lines  # noqa: E402


def tools(n, seed=0):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        props, required = {}, []
        for j in range(rnd.randint(2, 7)):
            kind = rnd.choice(KINDS)
            name = f"arg_{j}_{kind}"
            if kind == "string":
                s = {"type": "string", "description": "free text"}
            elif kind == "integer":
                s = {"type": "integer", "minimum": 0, "maximum": rnd.randint(10, 10000)}
            elif kind == "enum":
                s = {"type": "string", "enum": [f"opt{i}_{m}" for m in range(rnd.randint(2, 6))]}
            elif kind == "array":
                s = {"type": "array", "items": {"type": "string"}, "maxItems": rnd.randint(2, 10)}
            elif kind == "datetime":
                s = {"type": "string", "format": "date-time"}
            else:
                s = {"type": "string", "pattern": f"^[A-Z]{{2}}-{i}[0-9]{{3,6}}$"}
            props[name] = s
            if rnd.random() < 0.6:
                required.append(name)
        verb = rnd.choice(["get", "set", "find", "make"])
        out.append({"type": "function", "function": {
            "name": f"tool_{i}_{verb}", "description": f"Tool number {i}",
            "parameters": {"type": "object", "properties": props, "required": required}}})
    return out


def arguments(schema):
    args = {}
    for k, s in schema["properties"].items():
        if "enum" in s:
            args[k] = s["enum"][0]
        elif s["type"] == "integer":
            args[k] = 7
        elif s["type"] == "array":
            args[k] = ["a", "b"]
        elif s.get("format") == "date-time":
            args[k] = "2024-05-01T10:00:00Z"
        elif "pattern" in s:
            args[k] = "AB-0123"
        else:
            args[k] = "hello"
    return args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", "-r", type=int, default=5)
    ap.add_argument("--sizes", default="8,32,128,512")
    ap.add_argument("--no-peer", action="store_true", help="grammask only")
    ap.add_argument("--grammask", default=os.path.join(ROOT, "target", "release", "grammask"),
                    help="the grammask binary (another build to compare)")
    args = ap.parse_args()
    exe = args.grammask
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            tl = tools(n)
            tools_file = os.path.join(d, f"tools-{n}.json")
            with open(tools_file, "w") as f:
                json.dump(tl, f)
            tag = subprocess.run([exe, "tools", "preset", "--family", "qwen_3", "--tools", tools_file],
                                 stdout=subprocess.PIPE, text=True, check=True).stdout
            tag_file = os.path.join(d, f"tag-{n}.json")
            with open(tag_file, "w") as f:
                f.write(tag)
            first = tl[0]["function"]
            call = json.dumps({"name": first["name"], "arguments": arguments(first["parameters"])})
            text_file = os.path.join(d, f"text-{n}.txt")
            with open(text_file, "w") as f:
                f.write(f"Let me think.</think>\n\nI will call the tool now.\n<tool_call>\n{call}\n</tool_call>")
            runs = [("grammask", [exe, "bench", "--tokenizer", TOKENIZER, "--structural-tag", tag_file,
                                  "--text-file", text_file, "--repeats", str(args.repeats)])]
            if not args.no_peer:
                runs.append(("xgrammar", [sys.executable, os.path.join(ROOT, "benches", "peers", "grammar_bench.py"),
                                          "--tokenizer", TOKENIZER, "--structural-tag", tag_file, "--text", text_file,
                                          "-r", str(args.repeats), "--engines", "xgrammar"]))
            for engine, cmd in runs:
                for line in run_json_lines(cmd):
                    line.update({"tools": n, "engine": line.get("engine", engine)})
                    print(json.dumps(line), flush=True)
                    ttfm = line.get("ttfm_us", {})
                    rows[(line["engine"], n)] = ttfm.get("p50") if isinstance(ttfm, dict) else ttfm
    engines = sorted({e for e, _ in rows})
    print("\n| tools | " + " | ".join(f"{e} ttfm p50 ms | growth" for e in engines) + " |")
    print("|---|" + "---|---|" * len(engines))
    for i, n in enumerate(sizes):
        cells = []
        for e in engines:
            v = rows.get((e, n))
            prev = rows.get((e, sizes[i - 1])) if i else None
            cells.append("-" if v is None else f"{v / 1000:.2f}")
            cells.append(f"{v / prev:.2f}x" if v and prev else "")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
