"""Backend registry: which attention implementations exist here, and one object per name.

Stdlib only at import time. numpy and torch are probed lazily (importlib.util.find_spec first,
then a real import the first time a backend needs it) and the answers are cached.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from scratch.backends.array_common import concat_heads, split_heads

KNOWN = ("scratch", "numpy", "torch-cpu", "torch-cuda")
ALIASES = {"torch": ("torch-cuda", "torch-cpu")}  # first available wins

_probes: dict[str, str | None] = {}  # name -> None if usable, else the reason it is not
_backends: dict[str, Backend] = {}


@dataclass(frozen=True)
class Backend:
    """One attention implementation: its name, dtypes, kernels and its functions."""

    name: str
    dtypes: tuple[str, ...]
    kernels: tuple[str, ...]
    notes: str
    scaled_dot_product_attention: Callable
    multi_head_attention: Callable
    trace_attention: Callable
    # trace_example(example, options, *, dtype=None, on_projected=None) -> Trace
    trace_example: Callable
    # the gradients of scaled_dot_product_attention (numpy_backward.py, torch_backward.py)
    scaled_dot_product_attention_backward: Callable | None = None
    # flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False, sinks=None)  # noqa: E501
    flex_attention: Callable | None = None
    flex_attention_backward: Callable | None = None

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, dtypes={self.dtypes}, kernels={self.kernels})"


def _import_problem(module: str) -> str | None:
    """None when `module` imports, else a one-line reason."""
    try:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
        importlib.import_module(module)
    except Exception as exc:  # a broken or blocked install is 'unavailable', not a crash
        return f"{module} failed to import ({type(exc).__name__}: {exc})"
    return None


def _probe(name: str) -> str | None:
    """Why backend `name` is unavailable (None when it is available); cached."""
    if name not in _probes:
        if name == "scratch":
            reason = None
        elif name == "numpy":
            reason = _import_problem("numpy") or _import_problem("scratch.backends.numpy_backend")
        elif name == "torch-cpu":
            reason = _import_problem("torch")
        elif name == "torch-cuda":
            reason = _probe("torch-cpu")
            if reason is None:
                import torch

                if not torch.cuda.is_available():
                    reason = "torch.cuda.is_available() is False (no CUDA GPU or driver)"
        else:
            reason = "unknown backend"
        _probes[name] = reason
    return _probes[name]


def available() -> list[str]:
    """Names of the backends usable on this machine, "scratch" first."""
    return [name for name in KNOWN if _probe(name) is None]


_FUNCTIONS = (
    "scaled_dot_product_attention",
    "multi_head_attention",
    "trace_attention",
    "trace_example",
)
_BACKWARD = "scaled_dot_product_attention_backward"
# per family: the module holding _FUNCTIONS, and the module holding each further function
_MODULES = {
    "scratch": ("scratch.backends.scratch_backend", {_BACKWARD: "scratch.backward.sdpa"}),
    "numpy": (
        "scratch.backends.numpy_backend",
        {
            _BACKWARD: "scratch.backends.numpy_backward",
            "flex_attention": "scratch.backends.numpy_flex",
            "flex_attention_backward": "scratch.backends.numpy_flex",
        },
    ),
    "torch": (
        "scratch.backends.torch_backend",
        {
            _BACKWARD: "scratch.backends.torch_backward",
            "flex_attention": "scratch.backends.torch_flex",
            "flex_attention_backward": "scratch.backends.torch_flex",
        },
    ),
}


def _build(name: str) -> Backend:
    """Create the Backend object for an available name (its modules imported only now); a
    torch backend's functions are bound to its device."""
    family = "torch" if name.startswith("torch-") else name
    device = name.removeprefix("torch-")
    where, more = _MODULES[family]
    mod = importlib.import_module(where)
    if family == "torch":
        fns = mod.functions(device)
    else:
        fns = {f: getattr(mod, f) for f in _FUNCTIONS}
    for f, module in more.items():
        fn = getattr(importlib.import_module(module), f)
        fns[f] = partial(fn, device=device) if family == "torch" else fn
    return Backend(
        name=name,
        dtypes=tuple(getattr(mod, "DTYPES", ("float64",))),
        kernels=tuple(getattr(mod, "KERNELS", ("explicit",))),
        notes=str(getattr(mod, "NOTES", "")),
        **fns,
    )


def get(name: str) -> Backend:
    """The backend called `name` ("torch" picks torch-cuda when present, else torch-cpu)."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a backend name (str), found {type(name).__name__}")
    resolved = name
    if name in ALIASES:
        resolved = next((n for n in ALIASES[name] if _probe(n) is None), ALIASES[name][-1])
    if resolved not in KNOWN:
        raise ValueError(
            f"name: unknown backend {name!r}; expected one of {', '.join(available())} "
            f"(or 'torch' for the best torch device)"
        )
    reason = _probe(resolved)
    if reason is not None:
        raise ValueError(
            f"name: backend {name!r} is unavailable here ({reason}); available: "
            f"{', '.join(available())}"
        )
    if resolved not in _backends:
        _backends[resolved] = _build(resolved)
    return _backends[resolved]


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """NumPy's BLAS on one thread while the caller's workers run (numpy_threads'); nothing to
    hold without NumPy."""
    try:
        from scratch.backends.numpy_threads import single_threaded_blas as one_thread
    except ImportError:
        yield
        return
    with one_thread():
        yield


# split_heads, concat_heads: the head layout (array_common), for arrays or tensors
__all__ = ["Backend", "available", "get", "single_threaded_blas", "KNOWN", "split_heads",
           "concat_heads"]  # fmt: skip
