#!/usr/bin/env python3
"""MaskBench protocol runner for the peers (XGrammar, llguidance).

    python3 benches/peers/maskbench.py --engine xgrammar --limit 150 \\
        /work/shared/data/jsonschemabench/dev/Github_easy

Input: MaskBench JSON files {"schema": ..., "tests": [{"data": ..., "valid": bool}, ...]}
given as files or directories (a directory means its *.json files, sorted by name;
--limit N keeps the first N of each directory).

Protocol, per file:
  * compile: XGrammar  GrammarCompiler(info, max_threads=1, cache_enabled=False)
               .compile_json_schema(json.dumps(schema), any_whitespace=False,
               strict_mode=True), then GrammarMatcher(compiled);
             llguidance LLMatcher(tok, {"grammars": [{"json_schema": schema}]}) with
               schema["x-guidance"] = {"whitespace_flexible": false,
               "item_separator": ", ", "key_separator": ": "} (compact, the same
               separators as XGrammar's any_whitespace=False and json.dumps).
    time to first mask (ttfm) = compile + matcher creation (one sample per file).
    Any exception (or llguidance error state) here = a compile error: the file is
    counted in compile_errors and skipped.
  * each test gets a fresh matcher (XGrammar: GrammarMatcher(compiled), the first
    test reuses the one built inside ttfm; llguidance: deep_copy() of the pristine
    matcher), not timed.
  * tokens = tokenizer.encode(json.dumps(data, ensure_ascii=False)) without special
    tokens (default separators ", " and ": ") and without a SentencePiece dummy
    prefix (Llama-2; see peers_common.make_encoder).
  * for each token: fill the mask + accept the token, timed together (one mask_us
    sample per token, the bit check between them is not timed); a token is rejected
    when its bit is clear in the mask (then it is not fed) or the engine refuses it.
    Stop at the first rejected token (it still counts as a token and a mask).
  * an instance is accepted when every token is accepted and, after the last one,
    a stop token is allowed (one more fill, not timed): valid ones must be accepted,
    invalid ones rejected somewhere.

Stderr: one line per file and diagnostics.  The last stdout line is one JSON object
with exactly the keys engine, files, compile_errors, valid_accepted, valid_rejected,
invalid_rejected, invalid_accepted, tokens, mask_us, ttfm_us (the last two
{mean,p50,p90,p99,p999,max} in microseconds).  --details F writes one JSON line per
file (ttfm, per-test outcome, failing token) for comparing runners.
"""

import argparse
import gc
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402  (sets thread env vars first)

STAT_KEYS = ("mean", "p50", "p90", "p99", "p999", "max")
LLG_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def now():
    return time.perf_counter_ns()


def list_files(paths, limit):
    files = []
    for p in paths:
        if os.path.isdir(p):
            fs = sorted(glob.glob(os.path.join(p, "*.json")))
            if limit is not None:
                fs = fs[:limit]
            files.extend(fs)
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise SystemExit(f"no such file or directory: {p}")
    return files


class XgrEngine:
    def __init__(self, peer):
        self.peer = peer
        self.xgr = peer.xgr
        self.row = peer.row
        self.bm = peer.bitmask
        self.stop_ids = peer.stop_ids
        self.compiler = None

    def compile(self, schema):
        """Timed by the caller. Returns an opaque compiled state."""
        cg = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                               strict_mode=True)
        m = self.xgr.GrammarMatcher(cg)
        return {"cg": cg, "first": m}

    def fresh_compiler(self):
        # a new compiler per file: no state shared between files beyond the tokenizer
        self.compiler = self.peer.new_compiler()

    def matcher(self, compiled):
        m = compiled.pop("first", None)
        return m if m is not None else self.xgr.GrammarMatcher(compiled["cg"])

    def run(self, m, ids, times):
        """Feed ids; append per-token µs to times. Returns (accepted, fail_index, why)."""
        fill = m.fill_next_token_bitmask
        accept = m.accept_token
        bm, row = self.bm, self.row
        for i, t in enumerate(ids):
            a = now()
            fill(bm)
            b = now()
            allowed = (int(row[t >> 5]) >> (t & 31)) & 1
            c = now()
            ok = accept(t) if allowed else False
            d = now()
            times.append(((b - a) + (d - c)) / 1000.0)
            if not ok:
                return False, i, "mask" if not allowed else "accept-refused-allowed"
        fill(bm)
        if not any(pc.bit_is_set(row, s) for s in self.stop_ids):
            return False, len(ids), "end"
        return True, None, None


class LlgEngine:
    def __init__(self, peer):
        self.peer = peer
        self.row = peer.row
        self.ptr = peer.row.ctypes.data
        self.nbytes = peer.row.size * peer.row.itemsize
        self.stop_ids = peer.stop_ids

    def fresh_compiler(self):
        pass

    def compile(self, schema):
        if isinstance(schema, dict):
            schema = dict(schema)
            xg = schema.get("x-guidance")
            schema["x-guidance"] = {**(xg if isinstance(xg, dict) else {}), **LLG_JSON_OPTIONS}
        grammar = json.dumps({"grammars": [{"json_schema": schema}]})
        return {"m0": self.peer.matcher(grammar)}

    def matcher(self, compiled):
        return compiled["m0"].deep_copy()

    def run(self, m, ids, times):
        fill = m.unsafe_compute_mask_ptr
        accept = m.consume_token
        ptr, nbytes, row = self.ptr, self.nbytes, self.row
        for i, t in enumerate(ids):
            a = now()
            fill(ptr, nbytes)
            b = now()
            allowed = (int(row[t >> 5]) >> (t & 31)) & 1
            c = now()
            ok = accept(t) if allowed else False
            d = now()
            times.append(((b - a) + (d - c)) / 1000.0)
            if not ok:
                why = "mask" if not allowed else "accept-refused-allowed"
                if m.is_error() and allowed:
                    why += ": " + (m.get_error() or "")[:200]
                return False, i, why
        fill(ptr, nbytes)
        if not any(pc.bit_is_set(row, s) for s in self.stop_ids):
            return False, len(ids), "end"
        return True, None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True, choices=["xgrammar", "llguidance"])
    ap.add_argument("--tokenizer", default=pc.DEFAULT_TOKENIZER,
                    help="tokenizer.json or a folder holding one (default: Llama-3.1)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="mask width (default: len(tokenizer))")
    ap.add_argument("--limit", type=int, default=None,
                    help="first N files (sorted by name) of each directory")
    ap.add_argument("--details", default=None, help="write per-file JSON lines here")
    ap.add_argument("--quiet", action="store_true", help="no per-file lines on stderr")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()

    pc.set_torch_threads()
    files = list_files(args.paths, args.limit)
    tok, stop_ids = pc.load_tokenizer(args.tokenizer)
    encode = pc.make_encoder(args.tokenizer)
    vocab = args.vocab_size or len(tok)
    if args.engine == "xgrammar":
        eng = XgrEngine(pc.XGrammarPeer(tok, vocab, stop_ids))
    else:
        eng = LlgEngine(pc.LLGuidancePeer(tok, vocab, stop_ids))
    if not eng.stop_ids:
        raise SystemExit("no stop token id found (need tokenizer_config.json eos_token)")
    version = eng.peer.version()
    pc.log(f"{args.engine} {version}: {len(files)} files, vocab {vocab}, stop ids {eng.stop_ids}")

    totals = {"files": 0, "compile_errors": 0, "valid_accepted": 0, "valid_rejected": 0,
              "invalid_rejected": 0, "invalid_accepted": 0, "tokens": 0}
    diag = {"mask_accept_mismatch": 0, "rejected_at_end": 0, "files_without_tests": 0}
    mask_us, ttfm_us = [], []
    details = open(args.details, "w", encoding="utf-8") if args.details else None
    t_start = time.time()

    compiled = m = None
    for path in files:
        # free the previous file's grammar and matchers now, not inside the timing
        compiled = m = None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        totals["files"] += 1
        name = os.path.basename(path)
        rec = {"file": name}
        eng.fresh_compiler()
        # no gc.collect() here: a full collection walks every Python object (the
        # tokenizer's vocab dicts included) and evicts the CPU caches, which
        # measurably slows the compile that follows (llguidance p50 0.7 -> 1.2 ms)
        gc.disable()
        try:
            t0 = now()
            compiled = eng.compile(data["schema"])
            t1 = now()
        except Exception as e:  # noqa: BLE001 - any failure to compile
            gc.enable()
            totals["compile_errors"] += 1
            rec["compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if not args.quiet:
                pc.log(f"{name}: compile error: {rec['compile_error'][:160]}")
            if details:
                details.write(json.dumps(rec) + "\n")
            continue
        gc.enable()
        ttfm = (t1 - t0) / 1000.0
        ttfm_us.append(ttfm)
        rec["ttfm_us"] = round(ttfm, 1)
        rec["tests"] = []
        tests = data.get("tests") or []
        if not tests:
            diag["files_without_tests"] += 1
        ntok = 0
        for test in tests:
            text = json.dumps(test["data"], ensure_ascii=False)
            ids = encode(text)
            m = eng.matcher(compiled)
            gc.disable()
            try:
                n_before = len(mask_us)
                try:
                    accepted, fail_at, why = eng.run(m, ids, mask_us)
                except Exception as e:  # noqa: BLE001 - engine blew up mid-run
                    accepted, fail_at, why = False, len(mask_us) - n_before, f"exception: {e}"
                used = len(mask_us) - n_before
            finally:
                gc.enable()
            ntok += used
            if why and why.startswith("accept-refused-allowed"):
                diag["mask_accept_mismatch"] += 1
            if why == "end":
                diag["rejected_at_end"] += 1
            valid = bool(test["valid"])
            key = ("valid_" if valid else "invalid_") + ("accepted" if accepted else "rejected")
            totals[key] += 1
            t_rec = {"valid": valid, "accepted": accepted, "tokens": len(ids)}
            if not accepted:
                t_rec["fail_at"] = fail_at
                t_rec["why"] = why
                if fail_at is not None and fail_at < len(ids):
                    t_rec["fail_token"] = tok.decode([ids[fail_at]])
                    t_rec["before"] = tok.decode(ids[max(0, fail_at - 8):fail_at])[-60:]
            rec["tests"].append(t_rec)
        totals["tokens"] += ntok
        if not args.quiet:
            bad = [t for t in rec["tests"] if t["valid"] != t["accepted"]]
            pc.log(f"{name}: ttfm {ttfm / 1000.0:.2f} ms, {len(tests)} tests, {ntok} tokens"
                   + (f", WRONG {len(bad)}: " + "; ".join(
                       f"{'valid rejected' if t['valid'] else 'invalid accepted'}"
                       + (f" at {t.get('fail_at')} {t.get('fail_token', '')!r} ({t.get('why')})"
                          if not t["accepted"] else "") for t in bad) if bad else ""))
        if details:
            details.write(json.dumps(rec, ensure_ascii=False) + "\n")

    if details:
        details.close()
    pc.log(f"diagnostics: {json.dumps(diag)}; wall {time.time() - t_start:.1f} s; "
           f"{args.engine} {version}")
    out = {"engine": args.engine, **totals,
           "mask_us": pc.percentiles(mask_us, STAT_KEYS),
           "ttfm_us": pc.percentiles(ttfm_us, STAT_KEYS)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
