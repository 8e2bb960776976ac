#!/usr/bin/env python3
"""Per-token mask benchmark of the peers (XGrammar, llguidance) on one grammar and one text.

    python3 benches/peers/grammar_bench.py --grammar G.gbnf --text T.txt
    python3 benches/peers/grammar_bench.py --builtin-json --text benches/texts/json.txt

The text is tokenized without special tokens.  For every engine and every repeat
(default 5) a fresh run is made:

  * time to first mask (ttfm) = grammar compile + matcher creation + the first
    fill_next_token_bitmask, cold (XGrammar: GrammarCompiler(max_threads=1,
    cache_enabled=False), a new compiler per repeat; llguidance: a new LLMatcher,
    which is its whole compile step);
  * then for every token: fill the mask (timed), check that the token's bit is
    set (not timed), accept the token (timed).  The first token's fill is the
    one already inside ttfm.  A token outside the mask or refused is an error;
  * at the end (not timed) the grammar must be able to terminate: a stop token
    is in the mask and the engine reports completion.

Prints one JSON line per engine on stdout (times in microseconds):
  {"engine", "version", "grammar", "text", "tokens", "repeats",
   "ttfm_us": {"p50","min","mean","max"}, "per_token_us": {mean,p50,p90,p99,max}
   (fill + accept of the same token, pooled over all repeats), "fill_us": {...},
   "accept_us": {...}, "memory_bytes" (XGrammar: CompiledGrammar.memory_size_bytes;
   llguidance has no such figure -> null), "call_overhead_us" (median time of a
   trivial binding call, i.e. the Python->native cost included in every figure),
   "ok": true|false, "error": str|null}
Exit status 1 if any engine failed to accept the text.

Threads: RAYON_NUM_THREADS=1, OMP_NUM_THREADS=1, torch.set_num_threads(1),
XGrammar max_threads=1; llguidance computes masks on the calling thread.
Conversion of GBNF to llguidance's Lark (llguidance.grammar_from("gbnf", ...),
pure Python) is done once outside the timings and reported as "convert_us";
llguidance's own Lark parsing and grammar building is inside ttfm.
"""

import argparse
import gc
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402  (sets thread env vars first)

LLG_BUILTIN_JSON_LARK = "start: %json {}\n"
STAT_KEYS = ("mean", "p50", "p90", "p99", "max")


def xgrammar_compatible(ebnf):
    """XGrammar's EBNF parser rejects an empty alternative (json.gbnf's
    `ws ::= | " " | ...`); spell it `""`.  Returns (text, rewritten).
    Only used when XGrammar refused the grammar as written."""
    out = re.sub(r'::=(\s*)\|', r'::=\1"" |', ebnf)
    out = re.sub(r'\|(\s*)(?=\|)', r'| ""\1', out)
    return out, out != ebnf


def now():
    return time.perf_counter_ns()


def context(tok, ids, i):
    pre = tok.decode(ids[max(0, i - 12):i])
    cur = tok.decode([ids[i]])
    return f"token #{i} id={ids[i]} {cur!r} after ...{pre[-60:]!r}"


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def spin(us):
    """Busy-waits `us` microseconds after a token, as a decode thread polling its GPU
    stream does while the forward pass runs (not counted in any figure)."""
    if us:
        until = now() + us * 1000
        while now() < until:
            pass


def run_xgrammar(peer, spec, ids, tok, step_us=0):
    """One cold run. Returns dict(ttfm, fills, accepts, memory) or raises RuntimeError."""
    xgr = peer.xgr
    bm = peer.bitmask
    row = peer.row
    compiler = peer.new_compiler()
    gc.disable()  # no gc.collect(): it would evict the CPU caches just before ttfm
    try:
        t0 = now()
        if spec["builtin_json"]:
            cg = compiler.compile_builtin_json_grammar()
        elif spec.get("structural_tag"):
            cg = compiler.compile_structural_tag(spec["structural_tag"])
        else:
            cg = compiler.compile_grammar(spec["xgr_text"])
        m = xgr.GrammarMatcher(cg)
        fill = m.fill_next_token_bitmask
        accept = m.accept_token
        tf = now()
        fill(bm)
        t1 = now()
        ttfm = t1 - t0
        fills = [0] * len(ids)
        accepts = [0] * len(ids)
        fills[0] = t1 - tf
        for i, t in enumerate(ids):
            if i:
                a = now()
                fill(bm)
                b = now()
                fills[i] = b - a
            if not pc.bit_is_set(row, t):
                raise RuntimeError("mask forbids " + context(tok, ids, i))
            a = now()
            ok = accept(t)
            b = now()
            accepts[i] = b - a
            if not ok:
                raise RuntimeError("accept_token refused " + context(tok, ids, i))
            spin(step_us)
    finally:
        gc.enable()
    # end of text: the grammar must be able to stop here
    fill(bm)
    stop_ok = any(pc.bit_is_set(row, s) for s in peer.stop_ids)
    if not (m.is_completed() and stop_ok):
        raise RuntimeError(f"cannot terminate at end of text (is_completed={m.is_completed()}, "
                           f"stop token in mask={stop_ok})")
    if not accept(peer.stop_ids[0]) or not m.is_terminated():
        raise RuntimeError("stop token refused at end of text")
    return {"ttfm": ttfm, "fills": fills, "accepts": accepts,
            "memory": int(cg.memory_size_bytes)}


def run_llguidance(peer, spec, ids, tok, step_us=0):
    row = peer.row
    ptr = row.ctypes.data
    nbytes = row.size * row.itemsize
    gc.disable()  # no gc.collect(): it would evict the CPU caches just before ttfm
    try:
        t0 = now()
        m = peer.matcher(spec["llg_grammar"])
        fill = m.unsafe_compute_mask_ptr
        accept = m.consume_token
        tf = now()
        fill(ptr, nbytes)
        t1 = now()
        ttfm = t1 - t0
        fills = [0] * len(ids)
        accepts = [0] * len(ids)
        fills[0] = t1 - tf
        for i, t in enumerate(ids):
            if i:
                a = now()
                fill(ptr, nbytes)
                b = now()
                fills[i] = b - a
            if not pc.bit_is_set(row, t):
                raise RuntimeError("mask forbids " + context(tok, ids, i)
                                   + f" ({m.get_error() or 'no error'})")
            a = now()
            ok = accept(t)
            b = now()
            accepts[i] = b - a
            if not ok:
                raise RuntimeError("consume_token refused " + context(tok, ids, i)
                                   + f": {m.get_error()}")
            spin(step_us)
    finally:
        gc.enable()
    fill(ptr, nbytes)
    stop_ok = any(pc.bit_is_set(row, s) for s in peer.stop_ids)
    if not (m.is_accepting() and stop_ok):
        raise RuntimeError(f"cannot terminate at end of text (is_accepting={m.is_accepting()}, "
                           f"stop token in mask={stop_ok})")
    return {"ttfm": ttfm, "fills": fills, "accepts": accepts, "memory": None}


def call_overhead_us(fn, n=2000):
    ts = []
    for _ in range(n):
        a = now()
        fn()
        b = now()
        ts.append(b - a)
    return round(median(ts) / 1000.0, 3)


def bench_engine(name, peer, spec, ids, tok, repeats, warmup, step_us=0):
    runner = run_xgrammar if name == "xgrammar" else run_llguidance
    res = {"engine": name, "version": peer.version(), "grammar": spec["name"],
           "text": spec["text_name"], "tokens": len(ids), "repeats": repeats, "step_us": step_us}
    if name == "llguidance":
        res["convert_us"] = spec.get("llg_convert_us")
    elif not spec["builtin_json"] and not spec.get("structural_tag"):
        res["grammar_rewritten"] = spec["xgr_rewritten"]
    ttfms, fills, accepts, per_tok = [], [], [], []
    memory = None
    try:
        for r in range(warmup + repeats):
            out = runner(peer, spec, ids, tok, step_us)
            if r < warmup:
                continue
            ttfms.append(out["ttfm"] / 1000.0)
            fills.extend(f / 1000.0 for f in out["fills"])
            accepts.extend(a / 1000.0 for a in out["accepts"])
            per_tok.extend((f + a) / 1000.0 for f, a in zip(out["fills"], out["accepts"]))
            memory = out["memory"]
        res["ok"] = True
        res["error"] = None
    except Exception as e:  # noqa: BLE001 - report any engine failure
        res["ok"] = False
        res["error"] = f"{type(e).__name__}: {e}"
    res["ttfm_us"] = pc.percentiles(ttfms, ("p50", "min", "mean", "max"))
    res["per_token_us"] = pc.percentiles(per_tok, STAT_KEYS)
    res["fill_us"] = pc.percentiles(fills, STAT_KEYS)
    res["accept_us"] = pc.percentiles(accepts, STAT_KEYS)
    res["memory_bytes"] = memory
    # cost of crossing the binding, included in every fill/accept figure above
    try:
        if name == "xgrammar":
            cg = peer.new_compiler().compile_builtin_json_grammar()
            mm = peer.xgr.GrammarMatcher(cg)
            res["call_overhead_us"] = call_overhead_us(mm.is_terminated)
        else:
            mm = peer.matcher(LLG_BUILTIN_JSON_LARK)
            res["call_overhead_us"] = call_overhead_us(mm.is_accepting)
    except Exception:  # noqa: BLE001
        res["call_overhead_us"] = None
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default=pc.DEFAULT_TOKENIZER,
                    help="tokenizer.json or a folder holding one (default: Llama-3.1)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--grammar", help="GBNF / XGrammar EBNF file (root rule `root`)")
    g.add_argument("--builtin-json", action="store_true",
                   help="XGrammar's builtin JSON grammar; llguidance: `start: %%json {}`")
    g.add_argument("--structural-tag",
                   help="an XGrammar structural tag (JSON file); XGrammar only")
    ap.add_argument("--text", required=True, help="text file (read as UTF-8, used verbatim)")
    ap.add_argument("--repeats", "-r", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=0,
                    help="extra runs first, not counted (default 0: every run counts)")
    ap.add_argument("--engines", default="xgrammar,llguidance")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="mask width (default: len(tokenizer))")
    ap.add_argument("--name", default=None, help="grammar label in the output")
    ap.add_argument("--step-us", type=int, default=0,
                    help="busy-wait this many µs after each token, as a decode thread waiting on "
                         "its forward pass (default 0: back to back); not counted")
    args = ap.parse_args()

    pc.set_torch_threads()
    tok, stop_ids = pc.load_tokenizer(args.tokenizer)
    encode = pc.make_encoder(args.tokenizer)
    vocab = args.vocab_size or len(tok)
    with open(args.text, encoding="utf-8", newline="") as f:
        text = f.read()
    ids = encode(text)
    if not ids:
        raise SystemExit("empty text")
    if tok.decode(ids) != text:
        pc.log("note: decode(encode(text)) != text (decoder cleanup); tokens used as encoded")

    spec = {"builtin_json": args.builtin_json,
            "text_name": os.path.basename(args.text)}
    if args.builtin_json:
        spec["name"] = args.name or "builtin-json"
        spec["text"] = None
    elif args.structural_tag:
        with open(args.structural_tag, encoding="utf-8") as f:
            spec["structural_tag"] = f.read()
        spec["text"] = None
        spec["name"] = args.name or os.path.splitext(os.path.basename(args.structural_tag))[0]
    else:
        with open(args.grammar, encoding="utf-8") as f:
            spec["text"] = f.read()
        spec["name"] = args.name or os.path.splitext(os.path.basename(args.grammar))[0]

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    all_ok = True
    for name in engines:
        if name == "xgrammar":
            peer = pc.XGrammarPeer(tok, vocab, stop_ids)
            if spec["text"] is not None:
                # use the grammar as is; only if XGrammar cannot parse it, apply
                # the minimal rewrite and say so in the output
                try:
                    peer.xgr.Grammar.from_ebnf(spec["text"])
                    spec["xgr_text"], spec["xgr_rewritten"] = spec["text"], False
                except Exception:  # noqa: BLE001
                    spec["xgr_text"], spec["xgr_rewritten"] = xgrammar_compatible(spec["text"])
        elif name == "llguidance":
            if args.structural_tag:
                raise SystemExit("llguidance does not read XGrammar structural tags")
            peer = pc.LLGuidancePeer(tok, vocab, stop_ids)
            a = now()
            if args.builtin_json:
                spec["llg_grammar"] = peer.llg.LLMatcher.grammar_from_lark(LLG_BUILTIN_JSON_LARK)
            else:
                spec["llg_grammar"] = peer.llg.grammar_from("gbnf", spec["text"])
            spec["llg_convert_us"] = round((now() - a) / 1000.0, 1)
        else:
            raise SystemExit(f"unknown engine {name}")
        if not peer.stop_ids:
            raise SystemExit("no stop token id found (need tokenizer_config.json eos_token)")
        res = bench_engine(name, peer, spec, ids, tok, args.repeats, args.warmup, args.step_us)
        all_ok &= res["ok"]
        print(json.dumps(res), flush=True)
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
