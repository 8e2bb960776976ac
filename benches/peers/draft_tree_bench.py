#!/usr/bin/env python3
"""XGrammar GrammarMatcher.traverse_draft_tree timings on fixed draft trees.

    python3 benches/peers/draft_tree_bench.py --trees /tmp/trees.jsonl --repeats 9

The trees come from `grammask serving --what tree --dump-trees FILE`: one JSON line
per tree,
  {"case": name, "spec": "builtin-json" | {"json_schema": "<schema JSON text>"},
   "prefix": [token ids already accepted], "tokens": [...], "parents": [...]}
with node 0 the root (token -1, parent -1) and every other node's parent index
smaller than its own (a parent-index layout).

Per tree:
  * the parent-index layout is turned into XGrammar's first-child / next-sibling
    layout (retrieve_next_token, retrieve_next_sibling; children in ascending node
    order, -1 = none), 1-D int64 CPU tensors; draft_tokens = tokens with the root's
    token set to 0 (XGrammar never reads the root's token: the root is the current
    matcher state and is always "accepted"); the bitmask is a 2-D int32 tensor
    nodes x ceil(vocab/32) (xgr.allocate_token_bitmask);
  * a fresh GrammarMatcher(compiled) accepts the prefix (not timed; a refused prefix
    token skips the tree, with the reason on stderr and in the case's JSON line);
  * one untimed sanity call (bitmask pre-filled with a sentinel, so that rows XGrammar
    never writes are visible), then one warm-up call, then --repeats timed calls,
    each time.perf_counter_ns() around traverse_draft_tree (the garbage collector is
    paused inside the timed loop). traverse_draft_tree accepts and rolls back each
    node's token itself and leaves the matcher state unchanged; this is checked (mask,
    is_completed, jump-forward string before and after the calls) and the matcher
    would be rebuilt from the prefix if it had changed;
  * with --verify (default on) every row is compared with an independent
    fill_next_token_bitmask on a fork() that accepted the node's path (not timed).

Grammar compilation (once per distinct spec, not timed): builtin-json with
compile_builtin_json_grammar(), schemas with compile_json_schema(schema,
any_whitespace=False, strict_mode=True), GrammarCompiler(max_threads=1,
cache_enabled=False).  Tokenizer: Llama-3.1 tokenizer.json via peers_common (vocab
128,256), single thread (RAYON/OMP/MKL=1, torch.set_num_threads(1)).

Stdout: one JSON line per case, then a Markdown table.  Times in microseconds; the
median is over all of the case's trees x repeats.
"""

import argparse
import gc
import json
import os
import sys
import time
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402  (sets thread env vars first)

SENTINEL = 0x5A5A5A5A  # int32 value no real mask row is all made of (fills unvisited rows)


def now():
    return time.perf_counter_ns()


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def to_first_child_next_sibling(parents):
    """Parent-index layout -> (first_child, next_sibling) lists, children ascending."""
    n = len(parents)
    if n == 0 or parents[0] != -1:
        raise ValueError("node 0 must be the root (parent -1)")
    first_child = [-1] * n
    next_sibling = [-1] * n
    last_child = [-1] * n
    for i in range(1, n):
        p = parents[i]
        if not (0 <= p < i):
            raise ValueError(f"node {i}: parent {p} is not an earlier node")
        if first_child[p] == -1:
            first_child[p] = i
        else:
            next_sibling[last_child[p]] = i
        last_child[p] = i
    return first_child, next_sibling


def matcher_fingerprint(m, bm_row_tensor):
    """What a state change would show: the next mask, completion, jump-forward string."""
    m.fill_next_token_bitmask(bm_row_tensor)
    return (bytes(bm_row_tensor.numpy().tobytes()), m.is_completed(), m.is_terminated(),
            m.find_jump_forward_string())


class Case:
    def __init__(self, name):
        self.name = name
        self.times_us = []
        self.trees = 0
        self.nodes = 0
        self.skipped = []
        self.rejected_rows = 0      # rows XGrammar zeroed (token refused / after stop)
        self.unvisited_rows = 0     # rows under a rejected node: XGrammar never writes them
        self.terminated_rows = 0    # accepted stop token: zeroed row too (subset of zeroed)
        self.refused_rows = 0       # in the parent's mask but accept_token refused (subset)
        self.tree_medians_us = []
        self.verify_mismatch = 0
        self.state_changed = 0
        self.specs = set()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default="/tmp/trees.jsonl", help="JSONL of draft trees")
    ap.add_argument("--repeats", "-r", type=int, default=9, help="timed calls per tree")
    ap.add_argument("--tokenizer", default=pc.DEFAULT_TOKENIZER,
                    help="tokenizer.json or a folder holding one (default: Llama-3.1)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="mask width (default: len(tokenizer))")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="skip the row-by-row check against fork()+accept+fill")
    ap.add_argument("--jsonl-out", default=None, help="also write the case lines here")
    args = ap.parse_args()

    pc.set_torch_threads()
    import torch
    tok, stop_ids = pc.load_tokenizer(args.tokenizer)
    vocab = args.vocab_size or len(tok)
    peer = pc.XGrammarPeer(tok, vocab, stop_ids)
    xgr = peer.xgr
    version = peer.version()
    compiler = peer.new_compiler()
    compiled = {}  # spec key -> CompiledGrammar (compile not timed)
    row1 = xgr.allocate_token_bitmask(1, vocab)
    pc.log(f"xgrammar {version}, torch {torch.__version__}, vocab {vocab}, "
           f"torch threads {torch.get_num_threads()}")

    cases = OrderedDict()
    with open(args.trees, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f if l.strip()]

    for ti, d in enumerate(lines):
        name = d["case"]
        c = cases.setdefault(name, Case(name))
        spec = d["spec"]
        key = "builtin-json" if spec == "builtin-json" else json.dumps(spec, sort_keys=True)
        c.specs.add(key)
        tag = f"{name} tree#{ti}"
        try:
            if key not in compiled:
                if spec == "builtin-json":
                    compiled[key] = compiler.compile_builtin_json_grammar()
                else:
                    compiled[key] = compiler.compile_json_schema(
                        spec["json_schema"], any_whitespace=False, strict_mode=True)
            cg = compiled[key]
        except Exception as e:  # noqa: BLE001
            c.skipped.append({"tree": ti, "reason": f"compile: {type(e).__name__}: {e}"})
            pc.log(f"skip {tag}: compile error {e}")
            continue

        tokens, parents, prefix = d["tokens"], d["parents"], d["prefix"]
        n = len(tokens)
        fc, ns = to_first_child_next_sibling(parents)
        draft = list(tokens)
        draft[0] = 0  # never read by XGrammar
        t_next = torch.tensor(fc, dtype=torch.int64)
        t_sib = torch.tensor(ns, dtype=torch.int64)
        t_draft = torch.tensor(draft, dtype=torch.int64)
        bm = xgr.allocate_token_bitmask(n, vocab)

        def fresh_matcher():
            m = xgr.GrammarMatcher(cg)
            for i, t in enumerate(prefix):
                if not m.accept_token(t):
                    return None, f"prefix token #{i} id={t} {tok.decode([t])!r} refused"
            if m.is_terminated():
                return None, "matcher terminated after the prefix"
            return m, None

        m, why = fresh_matcher()
        if m is None:
            c.skipped.append({"tree": ti, "reason": why})
            pc.log(f"skip {tag}: {why}")
            continue

        before = matcher_fingerprint(m, row1)
        # sanity call (untimed): sentinel-filled buffer shows rows never written
        bm.fill_(SENTINEL)
        ok = m.traverse_draft_tree(t_next, t_sib, t_draft, bm)
        if not ok:
            raise SystemExit(f"{tag}: traverse_draft_tree timed out without a threshold")
        rows = bm.numpy()
        sentinel_rows = [i for i in range(n) if (rows[i] == SENTINEL).all()]
        zero_rows = [i for i in range(n) if not rows[i].any()]
        c.unvisited_rows += len(sentinel_rows)
        c.rejected_rows += len(zero_rows)
        if args.verify:
            bad, status = verify_rows(m, rows, tokens, parents, row1)
            c.verify_mismatch += bad
            c.terminated_rows += status.count("term")
            c.refused_rows += status.count("refused")

        if matcher_fingerprint(m, row1) != before:
            c.state_changed += 1
            pc.log(f"{tag}: matcher state changed by traverse_draft_tree; rebuilding")
            m, _ = fresh_matcher()

        traverse = m.traverse_draft_tree
        traverse(t_next, t_sib, t_draft, bm)  # warm-up
        ts = []
        gc.disable()
        try:
            for _ in range(args.repeats):
                a = now()
                traverse(t_next, t_sib, t_draft, bm)
                b = now()
                ts.append(b - a)
        finally:
            gc.enable()
        if matcher_fingerprint(m, row1) != before:
            c.state_changed += 1
            pc.log(f"{tag}: matcher state changed after the timed calls")
        c.times_us.extend(t / 1000.0 for t in ts)
        c.tree_medians_us.append(round(median(ts) / 1000.0, 1))
        c.trees += 1
        c.nodes += n
        pc.log(f"{tag}: {n} nodes, prefix {len(prefix)}, median {median(ts) / 1000.0:.1f} us "
               f"(min {min(ts) / 1000.0:.1f}, max {max(ts) / 1000.0:.1f}), "
               f"zeroed rows {len(zero_rows)}, unwritten rows {len(sentinel_rows)}")

    # call overhead of a trivial binding call (included in every figure)
    mm = xgr.GrammarMatcher(compiler.compile_builtin_json_grammar())
    oh = []
    for _ in range(2000):
        a = now()
        mm.is_terminated()
        oh.append(now() - a)
    overhead_us = round(median(oh) / 1000.0, 3)

    out_lines = []
    table = ["| case | trees | nodes | XGrammar traverse_draft_tree µs (median) |",
             "|---|---:|---:|---:|"]
    for c in cases.values():
        res = {
            "engine": "xgrammar", "version": version, "case": c.name,
            "trees": c.trees, "nodes": c.nodes,
            "nodes_per_tree": round(c.nodes / c.trees, 1) if c.trees else None,
            "repeats": args.repeats,
            "traverse_us": (dict(pc.percentiles(c.times_us, ("p50", "mean", "p90", "max")),
                                 min=round(min(c.times_us), 3)) if c.times_us else None),
            "median_us": round(median(c.times_us), 3) if c.times_us else None,
            "median_us_per_node": (round(median(c.times_us) * c.trees / c.nodes, 3)
                                   if c.times_us else None),
            "tree_medians_us": c.tree_medians_us,
            "mean_of_tree_medians_us": (round(sum(c.tree_medians_us) / c.trees, 1)
                                        if c.trees else None),
            "zeroed_rows": c.rejected_rows,
            "zeroed_rows_refused_by_accept": c.refused_rows if args.verify else None,
            "zeroed_rows_after_stop_token": c.terminated_rows if args.verify else None,
            "unwritten_rows": c.unvisited_rows,
            "rejected_nodes": c.rejected_rows + c.unvisited_rows
                              - (c.terminated_rows if args.verify else 0),
            "verify_mismatches": c.verify_mismatch if args.verify else None,
            "state_changed": c.state_changed,
            "skipped": c.skipped,
            "call_overhead_us": overhead_us,
            "vocab_size": vocab,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        line = json.dumps(res)
        out_lines.append(line)
        print(line, flush=True)
        med = f"{res['median_us']:.1f}" if res["median_us"] is not None else "skipped"
        table.append(f"| {c.name} | {c.trees} | {c.nodes} | {med} |")
    if args.jsonl_out:
        with open(args.jsonl_out, "w", encoding="utf-8") as f:
            f.write("\n".join(out_lines) + "\n")
    print()
    print("\n".join(table))
    bad = sum(c.verify_mismatch + c.state_changed for c in cases.values())
    sys.exit(1 if bad else 0)


def verify_rows(m, rows, tokens, parents, row1):
    """Recompute each node's row on a fork that accepted the node's path.

    Expected XGrammar semantics: root row = current mask; a node whose token is not
    in its parent's row, or is refused, gets a zero row and its subtree is not
    visited (rows left as they were); a node whose accepted token terminates the
    matcher (stop token) gets a zero row.  Returns (mismatching rows, status per node:
    "ok", "rej" (not in the parent's mask), "refused" (in the mask, refused by
    accept_token), "term" (stop token accepted), None (under a rejected node))."""
    n = len(tokens)
    # status: None = unvisited (under a rejected node), "rej", "term", "ok"
    status = [None] * n
    status[0] = "ok"
    mismatches = 0
    for i in range(n):
        if i:
            p = parents[i]
            if status[p] != "ok":
                continue  # not visited by XGrammar either
            t = tokens[i]
            in_parent = 0 <= t < rows.shape[1] * 32 and pc.bit_is_set(rows[p], t)
            if not in_parent:
                status[i] = "rej"
            else:
                f = m.fork()
                path = []
                j = i
                while j:
                    path.append(tokens[j])
                    j = parents[j]
                okp = all(f.accept_token(t2) for t2 in reversed(path))
                if not okp:
                    status[i] = "refused"
                elif f.is_terminated():
                    status[i] = "term"
                else:
                    status[i] = "ok"
                    f.fill_next_token_bitmask(row1)
                    if not (row1.numpy()[0] == rows[i]).all():
                        mismatches += 1
                        pc.log(f"  row {i} differs from fork+accept+fill")
        else:
            m.fill_next_token_bitmask(row1)
            if not (row1.numpy()[0] == rows[0]).all():
                mismatches += 1
                pc.log("  root row differs from fill_next_token_bitmask")
        if status[i] in ("rej", "refused", "term") and rows[i].any():
            mismatches += 1
            pc.log(f"  row {i} ({status[i]}) is not zero")
    for i in range(n):
        if status[i] is None and not (rows[i] == SENTINEL).all():
            mismatches += 1
            pc.log(f"  row {i} under a rejected node was written")
    return mismatches, status


if __name__ == "__main__":
    main()
