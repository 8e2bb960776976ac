"""An import-time stand-in for torch, for XGrammar's compiler and matcher alone.

XGrammar 0.2.8 imports torch when it loads (its bitmask helpers annotate with
``torch.Tensor``), and torch's wheel is gigabytes. The conformance helpers use only
XGrammar's compiler and its matcher's ``accept_string`` / ``is_terminated`` (C++), never a
tensor: any real use of torch through this stand-in fails loudly.
"""


# transformers reads this when torch has no installed distribution: without "dev" in it,
# it counts torch as absent and keeps to its torch-free paths.
__version__ = "0+shim"


class Tensor:  # noqa: D101 - a name for annotations only
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torch shim: XGrammar tried to make a tensor; install torch for that")


class _Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torch shim: {self._name} called; install torch for that")


class cuda:  # noqa: N801 - torch's module name
    """No GPU: XGrammar then registers no CUDA kernels."""

    @staticmethod
    def is_available():
        return False


def tensor(*args, **kwargs):
    """XGrammar's module constants (its full bitmask word): a placeholder any use of which
    fails."""
    return _Missing("a torch.tensor placeholder")


def __getattr__(name):
    return _Missing(f"torch.{name}")
