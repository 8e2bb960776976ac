#!/usr/bin/env python3
"""Baselines for `bench_bitmask --torch`: the same shapes and timing protocol, in PyTorch.

* ``masked_fill``: unpack the int32 bitmask to booleans with shifts, then
  ``logits.masked_fill_(~allowed, -inf)`` (for ``indices``: gather the rows, mask
  them, scatter them back). This is what a framework does without a custom kernel.
* ``xgrammar``: ``xgrammar.apply_token_bitmask_inplace`` when the package is
  installed (its CUDA/Triton kernel on GPU).

On CUDA each run is queued behind ``torch.cuda._sleep`` so the events time only the
masking; the median of ``--runs`` runs is printed. ``--device cpu`` runs the same
code with wall-clock timing (useful to check the script without a GPU).
"""

import argparse
import statistics
import time

import torch


def make_mask(batch, words, pattern, seed):
    g = torch.Generator().manual_seed(seed)
    if pattern == "random":
        return torch.randint(-(2**31), 2**31, (batch, words), generator=g, dtype=torch.int64).to(torch.int32)
    if pattern == "ones":
        return torch.full((batch, words), -1, dtype=torch.int32)
    if pattern in ("sparse", "dense"):
        bits = torch.rand(batch, words, 32, generator=g) < 0.01
        if pattern == "dense":
            bits = ~bits
        weights = torch.tensor([1 << k for k in range(32)], dtype=torch.int64)
        packed = (bits.to(torch.int64) * weights).sum(-1)
        return (((packed + 2**31) % 2**32) - 2**31).to(torch.int32)
    raise SystemExit(f"unknown pattern {pattern}")


def masked_fill_apply(logits, bitmask, vocab, indices):
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().view(bitmask.shape[0], -1)[:, :vocab]
    if indices is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        rows = logits[indices]
        rows.masked_fill_(~allowed[indices], float("-inf"))
        logits[indices] = rows


def time_runs(fn, device, runs, flush=None):
    for _ in range(10):
        fn()
    if device == "cuda":
        pairs = []
        for _ in range(runs):
            if flush is not None:
                flush.zero_()
            torch.cuda._sleep(100_000)
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) * 1e3 for a, b in pairs]
    else:
        times = []
        for _ in range(runs):
            if flush is not None:
                flush.zero_()
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", default="1,16,64,512,4096")
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--pattern", default="random")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--flush-l2", action="store_true")
    args = p.parse_args()

    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    try:
        import xgrammar as xgr  # noqa: F401
    except Exception:  # not installed, or broken
        xgr = None
    dev = args.device
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev) if args.flush_l2 else None
    words = (args.vocab + 31) // 32
    print(f"# PyTorch {torch.__version__} on {dev}" + (f", XGrammar {getattr(xgr, '__version__', '(version unknown)')}" if xgr else ", XGrammar not installed"))
    print(f"{'impl':>12} {'dtype':>5} {'batch':>6} {'rows':>6} {'median_us':>12}")
    for dname in args.dtypes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            logits = torch.zeros(batch, args.vocab, dtype=dtypes[dname], device=dev)
            mask = make_mask(batch, words, args.pattern, 0x5EED + batch).to(dev)
            for with_idx in (False, True):
                idx_list = list(range(0, batch, 2)) if with_idx else None
                idx_t = torch.tensor(idx_list, device=dev) if with_idx else None
                rows = len(idx_list) if with_idx else batch

                def run_mf():
                    masked_fill_apply(logits, mask, args.vocab, idx_t)

                impls = [("masked_fill", run_mf)]
                if xgr is not None:

                    def run_xgr():
                        xgr.apply_token_bitmask_inplace(logits, mask, indices=idx_list)

                    impls.append(("xgrammar", run_xgr))
                for name, fn in impls:
                    try:
                        us = time_runs(fn, dev, args.runs, flush)
                        print(f"{name:>12} {dname:>5} {batch:>6} {rows:>6} {us:>12.2f}")
                    except Exception as e:  # keep the table going
                        print(f"{name:>12} {dname:>5} {batch:>6} {rows:>6} {'failed':>12}  {e}")
            del logits, mask


if __name__ == "__main__":
    main()
