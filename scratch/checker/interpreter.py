"""What Triton's CPU interpreter (TRITON_INTERPRET=1) cannot show, said in the report of a
function that runs interpreted Triton kernels (measured with triton 3.9.0, torch 2.13 CPU)."""

from __future__ import annotations

import inspect
import sys
import types

BFLOAT16 = (
    "Triton's interpreter (TRITON_INTERPRET=1) gets tl.dot on bfloat16 tiles wrong, by about "
    "1e10 (it holds bfloat16 as 16-bit integer patterns and multiplies those): no bfloat16 "
    "kernel using tl.dot can pass on CPU; check bfloat16 where the kernel is compiled (a GPU)"
)


def is_interpreted_kernel(obj: object) -> bool:
    """Whether obj is a Triton kernel the interpreter runs (@triton.jit under TRITON_INTERPRET)."""
    kind = type(obj)
    return kind.__name__ == "InterpretedFunction" and kind.__module__.startswith("triton")


def runs_interpreted(fn: object) -> bool:
    """Whether fn reaches interpreted Triton kernels: one among fn's globals or in a module
    among them (fn's own module, or the one its kernels live in)."""
    fn = inspect.unwrap(getattr(fn, "func", fn))  # functools.partial, decorators
    names = getattr(fn, "__globals__", {})
    for value in list(names.values()):
        inside = vars(value).values() if isinstance(value, types.ModuleType) else (value,)
        if any(is_interpreted_kernel(x) for x in list(inside)):
            return True
    return False


def interpreter_notes(fn: object, dtype: str) -> list[str]:
    """The report's notes on what the interpreter cannot show for this check."""
    if dtype == "bfloat16" and "triton" in sys.modules and runs_interpreted(fn):
        return [BFLOAT16]
    return []
