"""Shared helpers for the peer benchmarks (XGrammar, llguidance).

Importing this module pins every thread pool to one thread *before* xgrammar,
llguidance or torch are imported, so import it first.
"""

import json
import math
import os
import sys

for _var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ[_var] = "false" if _var == "TOKENIZERS_PARALLELISM" else "1"

DEFAULT_TOKENIZER = "/work/shared/data/tokenizers/llama3_1/tokenizer.json"


def set_torch_threads():
    try:
        import torch  # xgrammar depends on torch
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass  # already set (interop pool started)
    except ImportError:
        pass


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def percentiles(values, keys=("mean", "p50", "p90", "p99", "max")):
    """Summary of a list of microsecond values, nearest-rank percentiles."""
    out = {}
    if not values:
        return {k: None for k in keys}
    s = sorted(values)
    n = len(s)

    def pct(p):
        # nearest-rank: smallest value with at least p% of the data <= it
        idx = max(0, min(n - 1, math.ceil(p * n / 100.0 - 1e-9) - 1))
        return s[idx]

    for k in keys:
        if k == "mean":
            out[k] = sum(s) / n
        elif k == "max":
            out[k] = s[-1]
        elif k == "min":
            out[k] = s[0]
        elif k.startswith("p"):
            # "p50" -> 50, "p99" -> 99, "p999" -> 99.9
            digits = k[1:]
            if len(digits) <= 2:
                p = float(digits)
            else:
                p = float(digits[:2] + "." + digits[2:])
            out[k] = pct(p)
    return {k: round(v, 3) for k, v in out.items()}


def resolve_tokenizer_path(path):
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise SystemExit(f"no tokenizer.json at {path}")
    return path


def load_tokenizer(path):
    """Return (hf_tokenizer, stop_ids).

    The tokenizer is a transformers.PreTrainedTokenizerFast built from the
    tokenizer.json (as ANCHORS.md prescribes).  Stop ids come from the EOS of
    a tokenizer_config.json next to it when there is one.
    """
    import transformers
    path = resolve_tokenizer_path(path)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    stop_ids = []
    cfg = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if os.path.isfile(cfg):
        with open(cfg, encoding="utf-8") as f:
            c = json.load(f)
        eos = c.get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            tid = tok.convert_tokens_to_ids(eos)
            if isinstance(tid, int) and tid >= 0 and tid != tok.unk_token_id:
                stop_ids.append(tid)
    if not stop_ids and tok.eos_token_id is not None:
        stop_ids.append(tok.eos_token_id)
    return tok, stop_ids


def make_encoder(path):
    """Text -> ids as a model would have generated them: no special tokens, and
    no SentencePiece dummy prefix.  Llama-2's tokenizer.json prepends "\u2581" to
    every input (normalizer Prepend), which would put a space before the text that a
    grammar never allows; generated text has no such space, so the Prepend step is
    dropped for encoding (the engines still get the unmodified tokenizer)."""
    from tokenizers import Tokenizer
    path = resolve_tokenizer_path(path)
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    norm = spec.get("normalizer")
    changed = False
    if isinstance(norm, dict):
        if norm.get("type") == "Prepend":
            spec["normalizer"] = None
            changed = True
        elif norm.get("type") == "Sequence":
            kept = [n for n in norm.get("normalizers", []) if n.get("type") != "Prepend"]
            if len(kept) != len(norm.get("normalizers", [])):
                norm["normalizers"] = kept
                changed = True
    pre = spec.get("pre_tokenizer")
    if isinstance(pre, dict) and pre.get("type") == "Metaspace" and \
            pre.get("prepend_scheme", "always") != "never":
        pre["prepend_scheme"] = "never"
        changed = True
    t = Tokenizer.from_str(json.dumps(spec))

    def enc(text):
        return t.encode(text, add_special_tokens=False).ids
    enc.dropped_prefix = changed
    return enc


def bit_is_set(mask_row, t):
    """mask_row: numpy int32 row or torch int32 row (XGrammar layout)."""
    return (int(mask_row[t >> 5]) >> (t & 31)) & 1 == 1


class XGrammarPeer:
    name = "xgrammar"

    def __init__(self, tok, vocab_size, stop_ids):
        import xgrammar as xgr
        set_torch_threads()
        self.xgr = xgr
        kw = {"vocab_size": vocab_size}
        if stop_ids:
            kw["stop_token_ids"] = stop_ids
        self.info = xgr.TokenizerInfo.from_huggingface(tok, **kw)
        self.vocab_size = vocab_size
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.row = self.bitmask[0]
        self.stop_ids = list(self.info.stop_token_ids)

    def new_compiler(self):
        # no compile cache, one thread: every compile is a cold compile
        return self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def version(self):
        from importlib.metadata import version
        return version("xgrammar")


class LLGuidancePeer:
    name = "llguidance"

    def __init__(self, tok, vocab_size, stop_ids):
        import llguidance
        import llguidance.hf
        import llguidance.numpy
        import numpy as np
        self.llg = llguidance
        self.fill_fn = llguidance.numpy.fill_next_token_bitmask
        eos = stop_ids if stop_ids else None
        self.lltok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab_size, eos_token=eos)
        self.vocab_size = vocab_size
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
        self.row = self.bitmask[0]
        self.stop_ids = list(stop_ids)
        self.np = np

    def matcher(self, grammar):
        """Build an LLMatcher (this is llguidance's whole compile step).

        Raises RuntimeError with llguidance's message if the grammar is bad."""
        m = self.llg.LLMatcher(self.lltok, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return m

    def version(self):
        from importlib.metadata import version
        return version("llguidance")
