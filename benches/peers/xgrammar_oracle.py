"""XGrammar 0.2.8 as the conformance suite's third oracle: compile verdicts for every case of
the corpus, and tool-calling outputs judged by XGrammar's own matcher on the same structural
tag.

Run by `grammask-conformance report --xgrammar PYTHON` (the suite writes the request and reads
the answer); by hand:

    python benches/peers/xgrammar_oracle.py < request.json > answer.json

Request: {"tokenizer": "path/to/tokenizer.json", "stop": [ids],
          "cases": [{"id", "kind", "json_schema" | "ebnf" | "regex" | "lark" | "structural_tag"}],
          "outputs": [{"case": id, "text": str, "complete": bool}]}
Answer:  {"version": str, "compiles": {id: null (compiled) | "error"},   # Lark cases absent: not XGrammar's
          "outputs": [null (valid) | "why not" | "n/a"]}

XGrammar imports torch when it loads, for bitmask helpers this script never calls; with
`PYTHONPATH=benches/peers/torch_shim` a stand-in satisfies that import (any tensor use fails
loudly), so `pip install --no-deps xgrammar==0.2.8 apache-tvm-ffi` plus `pydantic numpy
transformers` is enough (no torch wheel). Outputs are matched as bytes (`accept_string`), a
complete one must then take a stop token.
"""

import json
import re
import sys

import xgrammar as xgr
from transformers import PreTrainedTokenizerFast


def compile_case(compiler, case):
    if "json_schema" in case:
        return compiler.compile_json_schema(json.dumps(case["json_schema"]))
    if "ebnf" in case:
        return compiler.compile_grammar(case["ebnf"])
    if "regex" in case:
        return compiler.compile_regex(case["regex"])
    if "structural_tag" in case:
        return compiler.compile_structural_tag(case["structural_tag"])
    return None  # Lark, or a case grammask could not express: not XGrammar's language


def judge(compiled, stop, text, complete):
    m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=False)
    if not m.accept_string(text):
        # Find the first byte XGrammar refuses, for the report.
        probe = xgr.GrammarMatcher(compiled, terminate_without_stop_token=False)
        data = text.encode("utf-8")
        at = 0
        for i in range(len(data)):
            if not probe.accept_string(data[i : i + 1]):
                at = i
                break
        return f"xgrammar rejects byte {at} of {len(data)}: {data[max(0, at - 30):at + 10]!r}"
    if complete and not any(m.accept_token(s) for s in stop[:1]) and not m.is_terminated():
        return f"xgrammar: the output ({len(text.encode('utf-8'))} bytes) is unfinished"
    return None


def main():
    req = json.load(sys.stdin)
    hf = PreTrainedTokenizerFast(tokenizer_file=req["tokenizer"])
    info = xgr.TokenizerInfo.from_huggingface(hf, stop_token_ids=req.get("stop") or None)
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    compiled = {}
    compiles = {}
    for case in req["cases"]:
        try:
            g = compile_case(compiler, case)
        except Exception as e:  # XGrammar's refusal, whatever its type
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            # Drop XGrammar's log prefix ("[hh:mm:ss] /project/cpp/file.cc:820: ").
            compiles[case["id"]] = re.sub(r"^\[[0-9:]+\] \S+:[0-9]+: ", "", first)[:300]
            continue
        if g is not None:
            compiled[case["id"]] = g
            compiles[case["id"]] = None
    stop = list(info.stop_token_ids)
    outputs = []
    for o in req.get("outputs", []):
        g = compiled.get(o["case"])
        if g is None:
            outputs.append("n/a")
            continue
        try:
            outputs.append(judge(g, stop, o["text"], o["complete"]))
        except Exception as e:
            outputs.append(f"xgrammar failed: {e}")
    json.dump({"version": getattr(xgr, "__version__", "0.2.8"), "compiles": compiles, "outputs": outputs}, sys.stdout)


if __name__ == "__main__":
    main()
