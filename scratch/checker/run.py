"""The one runner: scratch.check and its backward and variant forms run a kernel on seeded cases
the same way (make the inputs, call, catch a raise, judge), into one CheckReport.

What differs between the kinds of case (forward.py, backward_run.py, variant_run.py: how the
inputs are made, how fn is called, how its answer is compared and named) is a `Kind`.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable

from ..tolerance import check_dtype, ulp
from ..validate import check_masked_rows
from .arrays import ARRAYS, Arrays
from .blas import own_work
from .cases import BACKWARD_FEATURES, CASE_SETS, FEATURES, cases_for
from .ignored import settle_ignored
from .prepare import prepare
from .raised import array_mismatch, describe, refused_keyword
from .report import CaseResult, CheckReport, shape_text

RULE_FACTOR = 2.0  # a kernel may have twice the largest error of the correct reference kernels
FLOOR_ULPS = 4.0  # plus this many units in the last place of max |truth|
BACKWARD_ARRAYS = ("numpy", "torch")
Progress = Callable[[int, int, str], None] | None


class BadResult(Exception):
    """fn returned something that is not an output (or not gradients)."""


class Kind:
    """What one kind of case adds to the runner: the inputs, the call, the judgement."""

    def __init__(self, fn: Callable, arrays: Arrays, dtype: str, seed: int, **settings):
        self.fn, self.arrays, self.dtype, self.seed = fn, arrays, dtype, seed
        self.masked_rows = settings.get("masked_rows", "zero")
        self.style = settings.get("style")
        self.accepts = accepted_keywords(fn)

    def needs(self, case) -> dict[str, bool]:
        """Keywords fn must take (when on) before the case's inputs are made."""
        return {}

    def inputs(self, case, result: CaseResult) -> tuple | None:
        """(prep, args, kwargs); None when the case cannot run (result says why). Here: a
        forward or backward case's seeded inputs and ground truth (prepare.py)."""
        with own_work():  # the inputs and the ground truth
            return made_inputs(
                result,
                lambda: prepare(case, self.arrays, result.dtype, self.seed, self.masked_rows),
                self.arrays,
            )

    def call(self, args: tuple, kwargs: dict) -> object:
        """fn's answer on the inputs; BadResult when it is not an answer."""
        return self.fn(*args, **kwargs)

    def judge(self, result: CaseResult, prep, args: tuple, kwargs: dict, found) -> CaseResult:
        """Compare fn's answer with the ground truth; pass, or fail with a message and a name."""
        raise NotImplementedError


def run_case(kind: Kind, case) -> CaseResult:
    """One case: fn must take its keywords, the inputs, the call (a raise fails or declines
    the case, raised.py), then the kind's judgement."""
    result = start_case(case, kind.dtype, kind.needs(case), kind.accepts)
    if result.status == "unsupported":
        return result
    made = kind.inputs(case, result)
    if made is None:
        return result
    prep, args, kwargs = made
    if not_taken(result, kwargs, kind.accepts):
        return result
    try:
        found = kind.call(args, kwargs)
    except BadResult as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, kind.arrays.array, kind.fn, kwargs)
    return kind.judge(result, prep, args, kwargs, found)


def run_checks(
    kind: Kind, target: str, settings: str, cases: list, progress: Progress, required: tuple
) -> CheckReport:
    """Every case into one report, telling `progress` before each; then `finish`."""
    report = CheckReport(target, settings)
    for n, case in enumerate(cases):
        if progress is not None:
            progress(n + 1, len(cases), case.name)
        report.cases.append(run_case(kind, case))
    return finish(report, required)


def check(
    fn: Callable,
    *,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    cases: str = "standard",
    seed: int = 0,
    masked_rows: str = "zero",
    require: object = (),
    progress: Progress = None,
) -> CheckReport:
    """Run fn on seeded cases and compare each output with the float64 ground truth (sampled
    rows of 4096-token cases in 16/32-bit dtypes: its float64 NumPy stand-in, float64_rows.py).

    fn(q, k, v, attn_mask=..., is_causal=..., scale=..., enable_gqa=...) gets only the keywords a
    case needs and returns the output or (output, weights). `require` (e.g. ("mask", "causal"))
    turns cases fn refuses for those features into failures. See the README's checker section.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    dtype, masked_rows = check_settings(
        array, ARRAYS, cases, CASE_SETS, seed, device, dtype, masked_rows
    )
    required = check_require(require)
    if cases == "large" and array == "list":
        raise ValueError(
            "cases: 'large' needs array='numpy' or 'torch' (4096-token lists are slow)"
        )
    arrays = Arrays(array, device)
    arrays.check_device()
    from .forward import Forward

    kind = Forward(fn, arrays, dtype, seed, masked_rows=masked_rows)
    settings = settings_line(
        array=array, dtype=dtype, device=device or "default", cases=cases, seed=seed,
        masked_rows=masked_rows, require=",".join(required),
    )  # fmt: skip
    return run_checks(kind, target_name(fn), settings, cases_for(cases, dtype), progress, required)


def check_backward(
    fn: Callable | None,
    *,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    cases: str = "standard",
    seed: int = 0,
    backward: Callable | None = None,
    masked_rows: str = "zero",
    require: object = (),
    progress: Progress = None,
) -> CheckReport:
    """Run a backward kernel on seeded cases and compare dq, dk, dv with the float64 ground truth.

    The kernel checked is `backward` when given (fn is then the forward it belongs to, named in
    the report, or None); else with array='torch' fn is a forward function differentiated by
    torch.autograd.grad with the case's seeded dO, and with array='numpy' fn is the backward.
    A backward is called as backward(q, k, v, grad_output, attn_mask=..., is_causal=...,
    scale=..., enable_gqa=..., dropout_p=..., dropout_mask=...) with only the keywords a case
    needs (dropout_mask: the forward's kept entries, True = kept) and returns (dq, dk, dv).
    """
    if backward is not None and not callable(backward):
        raise TypeError(f"backward: expected a callable, found {type(backward).__name__}")
    if fn is not None and not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    if fn is None and backward is None:
        raise TypeError("fn: expected a function (or backward=), found None")
    dtype, masked_rows = check_settings(
        array, BACKWARD_ARRAYS, cases, ("standard",), seed, device, dtype, masked_rows
    )
    required = check_require(require, BACKWARD_FEATURES)
    arrays = Arrays(array, device)
    arrays.check_device()
    from .backward_cases import backward_cases
    from .backward_run import Backward, backward_kernel

    kernel, target = backward_kernel(fn, backward, array)
    kind = Backward(kernel, arrays, dtype, seed, masked_rows=masked_rows)
    settings = settings_line(
        "backward", array=array, dtype=dtype, device=device or "default", cases=cases,
        seed=seed, masked_rows=masked_rows, require=",".join(required),
    )  # fmt: skip
    return run_checks(kind, target, settings, backward_cases(dtype), progress, required)


def check_variants(
    fn: Callable,
    *,
    variant_style: str | None = None,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    seed: int = 0,
    require: object = (),
    progress: Progress = None,
) -> CheckReport:
    """Run fn on the variant cases and compare each output with scratch.flex_attention's.

    fn(q, k, v, **keywords) gets q (1, H, L, E), k, v (1, Hkv, S, E / Ev) and the case's
    variant as FlashAttention's keywords (variant_style='flash': causal, window_size, softcap,
    alibi_slopes, sinks, cu_seqlens_q / cu_seqlens_k, attention_chunk) or FlexAttention's
    (variant_style='flex': mask_mod, score_mod, sinks); RoPE cases add rotary_cos, rotary_sin,
    rotary_interleaved. The style is read from fn's parameters when not given. `require`
    (e.g. "window,softcap") turns refused cases of those features into failures.
    """
    return _variants(fn, "fn", variant_style, array, dtype, device, seed, require, progress)


def check_variants_backward(
    backward: Callable,
    *,
    variant_style: str | None = None,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    seed: int = 0,
    require: object = (),
    progress: Progress = None,
) -> CheckReport:
    """Run backward on the variant cases and compare its gradients with the exact ones.

    backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv), or (dq, dk, dv, dsinks) in cases
    with sinks; the keywords as check_variants gives them (either style)."""
    return _variants(
        backward, "backward", variant_style, array, dtype, device, seed, require, progress
    )


def _variants(fn, name, style, array, dtype, device, seed, require, progress) -> CheckReport:
    """check_variants (name 'fn') or check_variants_backward (name 'backward')."""
    if not callable(fn):
        raise TypeError(
            f"{name}: expected a callable attention function, found {type(fn).__name__}"
        )
    from .variant_cases import VARIANT_FEATURES, variant_cases
    from .variant_keywords import style_of
    from .variant_run import Variant, VariantBackward, backward_case

    style = style_of(fn, style)
    dtype, _ = check_settings(array, ARRAYS, "standard", ("standard",), seed, device, dtype, "zero")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype: the variant checker takes float32 or float64, found {dtype!r}")
    required = check_require(require, tuple(VARIANT_FEATURES))
    arrays = Arrays(array, device)
    arrays.check_device()
    cases = variant_cases(dtype)
    if name == "backward":
        kind = VariantBackward(fn, arrays, dtype, seed, style=style)
        cases = [backward_case(c) for c in cases]
        settings = settings_line(
            "backward", variant_style=style, array=array, dtype=dtype, seed=seed
        )
    else:
        kind = Variant(fn, arrays, dtype, seed, style=style)
        settings = settings_line(
            variant_style=style, array=array, dtype=dtype, device=device or "default",
            seed=seed, require=",".join(required),
        )  # fmt: skip
    return run_checks(kind, target_name(fn), settings, cases, progress, required)


def settings_line(*words: str, **settings: object) -> str:
    """The report's settings line: 'backward, array=numpy, ..., seed=0' (an empty setting,
    such as no require, is left out)."""
    parts = list(words) + [f"{k}={v}" for k, v in settings.items() if v != ""]
    return ", ".join(parts)


def check_settings(
    array: str,
    arrays: tuple,
    cases: str,
    case_sets: tuple,
    seed: int,
    device: object,
    dtype: object,
    masked_rows: str,
) -> tuple[str, str]:
    """ValueError/TypeError for a bad setting; the dtype and masked_rows policy, normalised."""
    if array not in arrays:
        raise ValueError(f"array: expected one of {', '.join(arrays)}, found {array!r}")
    if cases not in case_sets:
        raise ValueError(f"cases: expected one of {', '.join(case_sets)}, found {cases!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, found {type(seed).__name__} {seed!r}")
    if device is not None and array != "torch":
        raise ValueError(f"device: only meaningful with array='torch', found array={array!r}")
    dtype = check_dtype(dtype)
    if dtype == "bfloat16" and array == "numpy":
        raise ValueError("dtype: numpy has no bfloat16; use array='torch' for bfloat16")
    return dtype, check_masked_rows(masked_rows)


def allowed_error(reference: float, top: float, dtype: str, floor: float = 0.0) -> float:
    """The rule's allowed max error: RULE_FACTOR x the largest error of the correct reference
    kernels (0 where not finite) + FLOOR_ULPS units in the last place of `top` (or `floor`)."""
    reference = reference if math.isfinite(reference) else 0.0
    return RULE_FACTOR * reference + max(FLOOR_ULPS * ulp(top, dtype), floor)


def target_name(fn: Callable) -> str:
    """module:qualname of a function, for the report."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}:{name}" if module else name


def finish(report: CheckReport, required: tuple[str, ...]) -> CheckReport:
    """Fail required features, and put the most frequent diagnosis first."""
    for r in report.cases:
        needed = [f for f in r.features if f in required]
        if r.status == "unsupported" and needed:
            r.status = "fail"
            r.message += f"; {', '.join(needed)} required"
    weigh_overflow(report.failed)
    settle_ignored(report.cases)
    found = [c.diagnosis for c in report.failed if c.diagnosis]
    if found:  # one entry per mistake: texts that differ only in numbers (a case's sizes)
        names = [re.sub(r"\d+", "#", d) for d in found]
        ranked = sorted(set(names), key=lambda n: (-names.count(n), names.index(n)))
        parts = []
        for name in ranked:
            texts = list(dict.fromkeys(d for d, n in zip(found, names) if n == name))
            more = len(texts) - 1
            alike = f" (and {more} more case{'s' * (more > 1)} alike)" if more else ""
            parts.append(texts[0] + alike)
        report.diagnosis = "; ".join(parts)
    return report


def weigh_overflow(failed: list[CaseResult]) -> None:
    """Overflow on large logits is weak evidence: any exp that blows up there shows it.

    A name found in another case wins over it; where it stands alone it also explains NaN in
    fully masked rows (exp(-1e10 - 0) = 0 in every key: 0/0), so that policy name goes."""
    names = {c.diagnosis for c in failed if c.diagnosis}
    overflow = {d for d in names if d.startswith("exp overflows")}
    if not overflow:
        return
    policy = {d for d in names if d.startswith("fully masked rows give masked_rows='nan'")}
    drop = overflow if names - overflow - policy else policy
    for c in failed:
        if c.diagnosis in drop:
            c.diagnosis = None


def check_require(require: object, known: tuple[str, ...] = tuple(FEATURES)) -> tuple[str, ...]:
    """'mask,causal' or ('mask', 'causal') -> a tuple of `known` names; ValueError if unknown."""
    if isinstance(require, str):
        require = [w.strip() for w in require.split(",") if w.strip()]
    if not isinstance(require, (list, tuple, set, frozenset)):
        raise TypeError(f"require: expected feature names, found {type(require).__name__}")
    for word in require:
        if word not in known:
            raise ValueError(f"require: expected names from {', '.join(known)}, found {word!r}")
    return tuple(require)


def accepted_keywords(fn: Callable) -> set[str] | None:
    """The keyword names fn accepts, or None when it takes **kwargs or has no signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def call(fn: Callable, args: tuple, kwargs: dict) -> tuple[object, object]:
    """fn on the case's arrays: (output, weights or None)."""
    result = fn(*args, **kwargs)
    if isinstance(result, tuple):
        if len(result) != 2:
            raise BadResult(
                f"fn returned a tuple of {len(result)} items; expected output or (output, weights)"
            )
        return result[0], result[1]
    return result, None


def start_case(case, dtype: str, needs: dict[str, bool], accepts) -> CaseResult:
    """A case's result, 'unsupported' already when fn lacks a keyword the case needs."""
    result = CaseResult(
        case.name, shape_text(case.q, case.k, case.v), case.options(), case.dtype or dtype, "fail"
    )
    result.features = case.features(dtype)
    missing = [w for w, on in needs.items() if on and accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
    return result


def not_taken(result: CaseResult, kwargs: dict, accepts: set[str] | None) -> bool:
    """Whether fn's signature lacks a keyword the case passes (the case is then unsupported)."""
    missing = [w for w in kwargs if accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
    return bool(missing)


def made_inputs(result: CaseResult, make: Callable, arrays: Arrays) -> tuple | None:
    """(prep, args, kwargs) from `make()`; None (the case unsupported) when inputs fail."""
    try:
        prep = make()
        return (prep, *prep.call_args(arrays))
    except (ValueError, TypeError) as exc:  # e.g. float64 on a device without it
        result.status = "unsupported"
        result.message = f"cannot make {result.dtype} inputs: {exc}"
        return None


def changed_in_place(result: CaseResult, changed: list[str]) -> CaseResult:
    """A failure: fn wrote into the inputs it was given."""
    names = ", ".join(changed)
    result.message = f"fn changed its {names} input in place"
    result.diagnosis = f"fn modifies its inputs in place ({names}): the caller's tensors change"
    return result


def kernel_raised(
    result: CaseResult, exc: Exception, array: str, fn: object, keywords: object = ()
) -> CaseResult:
    """fn's own error: a failure, or a refusal (unsupported) in a case that uses an optional
    feature when it is NotImplementedError or fn's signature refused one of `keywords`
    (raised.py: the rule, and torch.compile's wrappers taken off)."""
    word = refused_keyword(exc, keywords)
    if word is not None and result.features:
        result.status, result.message = "unsupported", f"fn takes no {word} keyword"
        return result
    found = describe(exc)
    result.raised, result.trace = found.kind, found.frames
    if found.refusal and result.features:
        result.status = "unsupported"
        result.message = f"raised {found.words} (uses {', '.join(result.features)})"
        return result
    result.status = "fail"
    result.message = f"raised {found.words}" + (
        " in a case with no optional feature to decline" if found.refusal else ""
    )
    result.diagnosis = array_mismatch(found, array, fn)  # the only name a raise gets
    return result


__all__ = ["check", "check_backward", "check_variants", "check_variants_backward"]
