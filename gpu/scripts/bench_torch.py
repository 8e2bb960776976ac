#!/usr/bin/env python3
"""Baselines for `bench_bitmask --torch`: the same shapes and timing protocol, in PyTorch.

* ``xgrammar``: ``xgrammar.apply_token_bitmask_inplace`` when the package is
  installed, with ``backend=--xgrammar-backend`` (``auto``, the default, is its
  Triton kernel on CUDA in 0.2.8; ``cuda`` is its CUDA C++ kernel, built as a
  PyTorch extension on first use). Its API takes ``indices`` as a Python list; the
  timed call includes turning that into a device tensor, as it does for callers.
* ``masked_fill``: unpack the int32 bitmask to booleans with shifts, then
  ``logits.masked_fill_(~allowed, -inf)`` (for ``indices``: gather the rows, mask
  them, scatter them back). This is what a framework does without a custom kernel.

Timing on CUDA: each run is queued behind a spin kernel (``torch.cuda._sleep``) of
``--spin-us`` microseconds, 2000 by default, and bracketed by CUDA events. The spin
must outlast the time Python takes to queue the run (tens of microseconds for
XGrammar's wrapper): a shorter spin lets the device go idle between the first event
and the kernel, and that idle time is then counted as the kernel's. ``_sleep``
counts clock cycles, so the cycles per microsecond are measured first. The median
of ``--runs`` runs after warm-up is reported.

Masks have the same statistics as bench_bitmask's (``random``: each bit 1/2;
``sparse``: 1 %; ``dense``: 99 %; ``ones``), drawn from torch's generator.

``--format table`` (default) prints a table; ``--format tsv`` prints
``RESULT<TAB>impl<TAB>pattern<TAB>dtype<TAB>batch<TAB>rows<TAB>median_us`` lines,
which bench_bitmask reads to print one table with grammask beside these.
``--device cpu`` runs the same code with wall-clock timing (to check the script
without a GPU).
"""

import argparse
import statistics
import sys
import time

import torch


def make_mask(batch, words, pattern, seed):
    g = torch.Generator().manual_seed(seed)
    if pattern == "random":
        return torch.randint(-(2**31), 2**31, (batch, words), generator=g, dtype=torch.int64).to(torch.int32)
    if pattern == "ones":
        return torch.full((batch, words), -1, dtype=torch.int32)
    if pattern in ("sparse", "dense"):
        # Row by row, so batch 4096 does not need a [batch, words, 32] float tensor.
        weights = torch.tensor([1 << k for k in range(32)], dtype=torch.int64)
        out = torch.empty(batch, words, dtype=torch.int32)
        for r in range(batch):
            bits = torch.rand(words, 32, generator=g) < 0.01
            if pattern == "dense":
                bits = ~bits
            packed = (bits.to(torch.int64) * weights).sum(-1)
            out[r] = (((packed + 2**31) % 2**32) - 2**31).to(torch.int32)
        return out
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


def sleep_cycles_per_us():
    """Clock cycles of torch.cuda._sleep per microsecond on this device."""
    torch.cuda._sleep(1000)
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    n = 20_000_000
    a.record()
    torch.cuda._sleep(n)
    b.record()
    b.synchronize()
    return n / (a.elapsed_time(b) * 1e3)


def copy_bandwidth(device):
    """Device-to-device copy bandwidth in GB/s, read + write counted."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(25):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        if i >= 5:
            times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    return 2 * n / statistics.median(times) / 1e9


def time_runs(fn, device, runs, spin_cycles, flush=None):
    for _ in range(10):
        fn()
    if device == "cuda":
        pairs = []
        for _ in range(runs):
            if flush is not None:
                flush.zero_()
            torch.cuda._sleep(spin_cycles)
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
    p.add_argument("--dtypes", default="f32,f16,bf16")
    p.add_argument("--pattern", "--patterns", dest="patterns", default="random,sparse,dense,ones")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--spin-us", type=float, default=2000.0)
    p.add_argument("--flush-l2", action="store_true")
    p.add_argument("--format", choices=("table", "tsv"), default="table")
    p.add_argument("--xgrammar-backend", default="auto")
    args = p.parse_args()

    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    try:
        import xgrammar as xgr
    except Exception as e:  # not installed, or broken
        print(f"# XGrammar not available: {e}", file=sys.stderr)
        xgr = None
    dev = args.device
    spin_cycles = 0
    xgr_desc = f"{getattr(xgr, '__version__', '?')} (backend {args.xgrammar_backend})" if xgr else "not installed"
    header = [f"# PyTorch {torch.__version__} on {dev}, XGrammar {xgr_desc}"]
    if dev == "cuda":
        cycles_per_us = sleep_cycles_per_us()
        spin_cycles = int(args.spin_us * cycles_per_us)
        header.append(
            f"# {torch.cuda.get_device_name()}: copy {copy_bandwidth(dev):.0f} GB/s (read+write); "
            f"each run behind a {args.spin_us:g} us spin ({spin_cycles} cycles of _sleep)"
        )
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev) if args.flush_l2 else None
    words = (args.vocab + 31) // 32
    for line in header:
        print(line, flush=True)
    if args.format == "table":
        print(f"{'impl':>12} {'pattern':>7} {'dtype':>5} {'batch':>6} {'rows':>6} {'median_us':>12}")
    for pattern in args.patterns.split(","):
        for dname in args.dtypes.split(","):
            for batch in [int(b) for b in args.batches.split(",")]:
                logits = torch.zeros(batch, args.vocab, dtype=dtypes[dname], device=dev)
                mask = make_mask(batch, words, pattern, 0x5EED + batch).to(dev)
                for with_idx in (False, True):
                    idx_list = list(range(0, batch, 2)) if with_idx else None
                    idx_t = torch.tensor(idx_list, device=dev) if with_idx else None
                    rows = len(idx_list) if with_idx else batch

                    def run_mf():
                        masked_fill_apply(logits, mask, args.vocab, idx_t)

                    impls = []
                    if xgr is not None:

                        def run_xgr():
                            xgr.apply_token_bitmask_inplace(
                                logits, mask, indices=idx_list, backend=args.xgrammar_backend
                            )

                        impls.append(("xgrammar", run_xgr))
                    impls.append(("masked_fill", run_mf))
                    for name, fn in impls:
                        try:
                            us = f"{time_runs(fn, dev, args.runs, spin_cycles, flush):.2f}"
                            err = ""
                        except Exception as e:  # keep the table going
                            us, err = "failed", f"  {e}"
                        if args.format == "tsv":
                            print(f"RESULT\t{name}\t{pattern}\t{dname}\t{batch}\t{rows}\t{us}", flush=True)
                            if err:
                                print(f"# {name} {pattern} {dname} {batch}: {err.strip()}", file=sys.stderr)
                        else:
                            print(f"{name:>12} {pattern:>7} {dname:>5} {batch:>6} {rows:>6} {us:>12}{err}", flush=True)
                del logits, mask


if __name__ == "__main__":
    main()
