"""What a kernel raised: its own exception (torch.compile's wrappers taken off) and its lines.

The rule (every checker): NotImplementedError is the kernel declining a case (Python's
convention, and torch's for an op it lacks); any other exception is a failure of the case.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import sysconfig
import traceback
import types
from dataclasses import dataclass

FRAMES = 3  # the last frames of the user's code shown under a failing case
COMPILERS = ("torch._dynamo", "torch._inductor")  # wrappers around the user's own error
OBSERVED = re.compile(r"raised exception (\w+)\((.*)\)\s*$", re.S)  # dynamo's record of a raise
LIBRARIES = ("numpy", "torch", "triton", "jax")  # their frames are not the user's code
KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


@dataclass(frozen=True)
class Raised:
    """The kernel's exception in words, the user's last frames, and whether it is a refusal."""

    kind: str  # the exception's type: 'TypeError', or 'torch._dynamo.exc.Unsupported'
    message: str  # its first line (a compile error: with dynamo's explanation)
    frames: tuple[str, ...]  # 'file:line in function: source line', innermost last
    refusal: bool  # NotImplementedError: the kernel declined the case

    @property
    def words(self) -> str:
        """'TypeError: message'."""
        return f"{self.kind}: {self.message}" if self.message else self.kind


def describe(exc: BaseException) -> Raised:
    """exc as the user wrote it: torch.compile's wrappers followed to the error behind them
    (their __cause__, BackendCompilerFailed's inner_exception, dynamo's record of a raise) and
    the user's line (dynamo's real_stack, else the traceback without the checker or libraries)."""
    chain = compile_chain(exc)
    stack = next((s for e in chain if (s := getattr(e, "real_stack", None))), None)
    kind, message, refusal = original(chain)
    frames = user_frames(stack if stack else traceback.extract_tb(exc.__traceback__))
    return Raised(kind, message, frames, refusal)


def refused_keyword(exc: BaseException, keywords: object) -> str | None:
    """The keyword fn refused as Python refuses one a signature lacks: a TypeError "unexpected
    keyword argument 'W'" naming one of the `keywords` the checker passed (raised by the call
    itself, by a **kwargs check, or by the function fn hands its keywords to), else None."""
    found = KEYWORD.search(str(exc)) if isinstance(exc, TypeError) else None
    return found.group(1) if found is not None and found.group(1) in keywords else None


def from_compiler(exc: BaseException) -> bool:
    """Whether torch.compile raised exc (dynamo or inductor) rather than the user's code."""
    return type(exc).__module__.startswith(COMPILERS)


def compile_chain(exc: BaseException) -> list[BaseException]:
    """exc, then what each compiler exception wraps, down to the first that is not one."""
    chain = [exc]
    while from_compiler(chain[-1]):
        e = chain[-1]
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if inner is None and not e.__suppress_context__:
            inner = e.__context__
        if inner is None or any(inner is seen for seen in chain):
            break
        chain.append(inner)
    return chain


def original(chain: list[BaseException]) -> tuple[str, str, bool]:
    """(type name, first line, refusal) of the error behind a chain of compiler exceptions."""
    last = chain[-1]
    if not from_compiler(last):
        return type_name(last), first_line(last), isinstance(last, NotImplementedError)
    for e in chain:  # dynamo's record of an exception the traced code raised
        found = OBSERVED.search(first_line(e))
        if found:
            name, args = found.groups()
            try:
                value = ast.literal_eval(args)
                args = value if isinstance(value, str) else args
            except (ValueError, SyntaxError):
                pass
            return name, args, name == "NotImplementedError"
    outer = chain[0]
    why = next(
        (line.strip()[len("Explanation:") :].strip() for line in str(outer).splitlines()
         if line.strip().startswith("Explanation:")),
        "",
    )  # fmt: skip
    message = first_line(outer) + (f": {why}" if why else "")
    return type_name(outer), message, False


def type_name(exc: BaseException) -> str:
    """'TypeError' for builtins, else 'module.Name'."""
    cls = type(exc)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 200 characters."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def user_frames(frames: list) -> tuple[str, ...]:
    """The last FRAMES frames outside the checker, the standard library and array libraries
    (the last frame outside the checker when every frame is a library's)."""
    skip = library_dirs()
    checker = skip[0]
    theirs = [f for f in frames if not f.filename.startswith(checker)]
    mine = [f for f in theirs if not f.filename.startswith(skip) and not _frozen(f.filename)]
    return tuple(frame_text(f) for f in (mine or theirs[-1:])[-FRAMES:])


def library_dirs() -> tuple[str, ...]:
    """The checker's folder first, then the standard library's and the array libraries'."""
    found = [os.path.dirname(os.path.abspath(__file__)) + os.sep]
    paths = sysconfig.get_paths()
    found += [paths[k] + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)]
    for name in LIBRARIES:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where:
            found.append(os.path.dirname(os.path.abspath(where)) + os.sep)
    return tuple(found)


def _frozen(filename: str) -> bool:
    """'<frozen importlib._bootstrap>' and the like: Python's own."""
    return filename.startswith("<frozen")


def frame_text(frame: traceback.FrameSummary) -> str:
    """'tests/kern.py:12 in kern: j = ids[n]' (the path relative to the working folder when
    inside it)."""
    path = frame.filename
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:  # another drive
        pass
    line = (frame.line or "").strip()
    return f"{path}:{frame.lineno} in {frame.name}" + (f": {line}" if line else "")


def array_mismatch(found: Raised, array: str, fn: object) -> str | None:
    """A diagnosis when fn crashed on the array type it was given: lists to a NumPy kernel
    ('list' in a TypeError or AttributeError), NumPy arrays to a torch kernel."""
    if found.kind not in ("TypeError", "AttributeError"):
        return None
    if array == "list" and ("'list'" in found.message or "list indices" in found.message):
        return f"fn raised {found.words} on list inputs: did you mean {_guess(fn)}?"
    if array == "numpy" and "numpy.ndarray" in found.message and "Tensor" in found.message:
        return f"fn raised {found.words} on numpy inputs: did you mean array='torch'?"
    return None


def _guess(fn: object) -> str:
    """array='numpy' or array='torch', from the libraries fn's module imports."""
    found = getattr(fn, "__globals__", {}).values()  # what fn's own module has imported
    names = {m.__name__ for m in found if isinstance(m, types.ModuleType)}
    numpy, torch = "numpy" in names, any(n == "torch" or n.startswith("torch.") for n in names)
    if numpy != torch:
        return "array='numpy'" if numpy else "array='torch'"
    return "array='numpy' or array='torch'"


__all__ = ["FRAMES", "Raised", "array_mismatch", "describe", "refused_keyword"]
