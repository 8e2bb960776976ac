#!/usr/bin/env python3
"""One sitting: tool-calling structural tags, grammask against XGrammar 0.2.8, on the same
tag files and the same agent transcripts, interleaved setup by setup.

    cargo build --release -p grammask
    python3 benches/structural_tag/tools_sitting.py [--repeats 5] [--out /tmp/tools.jsonl]

Setups: three presets (qwen_3 on the Qwen3 tokenizer, llama on Llama-3.1's, deepseek_v3_1
on Qwen3's: no DeepSeek tokenizer is in ../shared, so its markers are multi-token text)
with 5 and 20 tools. Tools are function-calling schemas from the Glaiveai2K dev split of
JSONSchemaBench (the first files with distinct names, sorted), their arguments the
split's valid instances. Each tag is written by `grammask tools preset` (the same JSON as
XGrammar's `get_model_structural_tag`, see core/tests/integration/tool_presets.rs) and given to both
engines from the same file.

Each transcript is an agent turn: a reasoning block closed by the model (reasoning
"enabled": the prompt opened it), >= 200 tokens of free text, then 1-3 calls. A second
transcript holds the same turn without its calls: its per-token mean is the free-text
steps' cost. grammask is timed by `grammask bench` (cold: fresh compile per repeat, masks
computed lazily while walking), XGrammar by benches/peers/grammar_bench.py (its per-token
figures include the Python binding's call overhead, reported beside them).

`--step-us N` makes both engines busy-wait N µs after every token (a decode thread waiting
on its forward pass; not counted), `--background` compiles grammask's grammars with
`background_precompute` (a thread computes the masks while the walk goes on).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "data"))
GLAIVE = os.path.join(SHARED, "jsonschemabench", "dev", "Glaiveai2K")
TOKENIZERS = os.path.join(SHARED, "tokenizers")

FREE_TEXT = (
    "I'd be happy to help you plan the trip. Before booking anything, let me think about what we "
    "need: the weather in both cities over the weekend, a quick look at events happening there, "
    "and then a calendar entry so that you don't forget the departure time. Lyon is usually mild "
    "in late spring, but storms can roll in from the Alps quite suddenly, so it is worth checking "
    "the forecast rather than guessing. I will also search for restaurants near the old town, "
    "since you mentioned that you would like a traditional bouchon for dinner on Saturday evening. "
    "Prices there vary a lot, from casual places where a menu costs twenty euros to starred "
    "restaurants where it costs ten times that. Once I have the results, I can summarise the "
    "options, compare them with your budget, and suggest a schedule that leaves enough time for "
    "the museum you wanted to see, the walk along the river, and a slow breakfast on Sunday "
    "before the train back. Let me start with the first lookups now.\n\n"
)
REASONING = "The user wants a weekend plan; I should call the tools for facts instead of guessing."

sys.path.insert(0, os.path.join(ROOT, "benches"))
from grammar_sitting import run_json_lines  # noqa: E402

SETUPS = [("qwen_3", "qwen3"), ("llama", "llama3_1"), ("deepseek_v3_1", "qwen3")]


def glaive_tools(n):
    """The first `n` Glaive schemas with distinct tool names and a valid instance."""
    tools, seen = [], set()
    for path in sorted(glob.glob(os.path.join(GLAIVE, "*.json"))):
        name = os.path.basename(path).split("---", 1)[1].rsplit("_", 1)[0]
        if name in seen:
            continue
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        valid = [t["data"] for t in d.get("tests", []) if t.get("valid")]
        if not valid or not isinstance(valid[0], dict):
            continue
        seen.add(name)
        tools.append(({"type": "function", "function": {"name": name, "parameters": d["schema"]}}, valid[0]))
        if len(tools) == n:
            break
    return tools


def call_text(family, name, args):
    a = json.dumps(args, ensure_ascii=False)
    if family == "qwen_3":
        return f'<tool_call>\n{{"name": "{name}", "arguments": {a}}}\n</tool_call>'
    if family == "llama":
        return f'{{"name": "{name}", "parameters": {a}}}'
    if family == "deepseek_v3_1":
        return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{a}<｜tool▁call▁end｜>"
    raise ValueError(family)


def transcript(family, calls, with_calls):
    head = REASONING + "</think>" + ("\n\n" if family == "qwen_3" else "")
    if family == "llama":
        head = ""  # Llama 3.x has no reasoning block
    if not with_calls:
        return head + FREE_TEXT
    body = "".join(call_text(family, n, a) for n, a in calls)
    if family == "deepseek_v3_1":
        body = "<｜tool▁calls▁begin｜>" + body + "<｜tool▁calls▁end｜>"
    return head + FREE_TEXT + body


def f(x, d=2):
    return "-" if x is None else (f"{x:,.0f}" if x >= 1000 else f"{x:.{d}f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", "-r", type=int, default=5)
    ap.add_argument("--out")
    ap.add_argument("--step-us", type=int, default=0,
                    help="both engines busy-wait this many µs after each token, as a decode thread "
                         "waiting on its forward pass (default 0: tokens back to back)")
    ap.add_argument("--background", action="store_true",
                    help="grammask compiles with background_precompute (a thread computes the masks "
                         "while the walk goes on; no eager budget)")
    args = ap.parse_args()
    step = ["--step-us", str(args.step_us)]
    exe = os.path.join(ROOT, "target", "release", "grammask")
    tmp = tempfile.mkdtemp(prefix="tools_sitting_")
    rows, records = [], []
    for family, tok in SETUPS:
        for n_tools in (5, 20):
            tools = glaive_tools(n_tools)
            tools_file = os.path.join(tmp, f"tools_{n_tools}.json")
            with open(tools_file, "w", encoding="utf-8") as fh:
                json.dump([t for t, _ in tools], fh)
            tag = subprocess.run([exe, "tools", "preset", "--family", family, "--tools", tools_file],
                                 stdout=subprocess.PIPE, text=True, check=True).stdout
            tag_file = os.path.join(tmp, f"{family}_{n_tools}.json")
            with open(tag_file, "w", encoding="utf-8") as fh:
                fh.write(tag)
            # 1-3 calls: the first, middle and last tools' instances.
            picks = sorted({0, n_tools // 2, n_tools - 1})[: 1 + n_tools // 10 + 1]
            calls = [(tools[i][0]["function"]["name"], tools[i][1]) for i in picks]
            for kind, with_calls in (("turn", True), ("free text", False)):
                text_file = os.path.join(tmp, f"{family}_{n_tools}_{'calls' if with_calls else 'text'}.txt")
                with open(text_file, "w", encoding="utf-8") as fh:
                    fh.write(transcript(family, calls, with_calls))
                tok_dir = os.path.join(TOKENIZERS, tok)
                ours = run_json_lines([exe, "bench", "--tokenizer", tok_dir, "--structural-tag", tag_file,
                                       "--text-file", text_file, "--repeats", str(args.repeats)] + step
                                      + (["--background"] if args.background else []))
                peer = run_json_lines([sys.executable, os.path.join(ROOT, "benches", "peers", "grammar_bench.py"),
                                       "--tokenizer", tok_dir, "--structural-tag", tag_file, "--text", text_file,
                                       "-r", str(args.repeats), "--engines", "xgrammar"] + step)
                label = dict(family=family, tokenizer=tok, tools=n_tools, calls=len(calls) if with_calls else 0,
                             transcript=kind)
                records.append(dict(label, grammask=ours, xgrammar=peer))
                g = ours[0] if ours else {}
                x = peer[0] if peer and peer[0].get("ok") else {}
                gm, xm = g.get("per_token_us_cold", {}), x.get("per_token_us", {})
                rows.append((family, tok, n_tools, kind, g.get("tokens"),
                             g.get("ttfm_us", {}).get("p50"), x.get("ttfm_us", {}).get("p50"),
                             gm.get("mean"), xm.get("mean"), gm.get("p99"), xm.get("p99"),
                             x.get("call_overhead_us"), (peer[0].get("error") if peer else "no output")))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r) + "\n")
    print("| preset | tokenizer | tools | transcript | tokens | ttfm µs grammask | ttfm µs XGrammar "
          "| per-token mean µs grammask | XGrammar | ratio | p99 µs grammask | XGrammar | ratio | XGrammar call overhead µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fam, tok, n, kind, toks, gt, xt, gm, xm, g99, x99, ov, err in rows:
        ratio = lambda a, b: f"{a / b:.2f}" if a is not None and b else "-"
        print(f"| {fam} | {tok} | {n} | {kind} | {toks} | {f(gt, 0)} | {f(xt, 0)} | {f(gm)} | {f(xm)} | "
              f"{ratio(gm, xm)} | {f(g99)} | {f(x99)} | {ratio(g99, x99)} | {f(ov)} |"
              + (f" XGrammar: {err}" if err else ""))


if __name__ == "__main__":
    main()
