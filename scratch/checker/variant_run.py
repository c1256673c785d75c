"""check_variants: run a kernel on the variant cases, compare with scratch.flex_attention, name
the mistake. See the README's checker section ("Variants")."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .arrays import ARRAYS, Arrays
from .report import CaseResult, CheckReport, shape_text
from .run import (
    BadResult,
    accepted_keywords,
    call,
    check_require,
    check_settings,
    finish,
    kernel_raised,
    run_all,
    target_name,
)
from .variant_cases import VARIANT_FEATURES, VariantCase, variant_cases
from .variant_diagnosis import diagnose
from .variant_keywords import NoKeyword, keywords, style_of
from .variant_prepare import prepare_variant


def check_variants(
    fn: Callable,
    *,
    variant_style: str | None = None,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    seed: int = 0,
    require: object = (),
    progress: Callable[[int, int, str], None] | None = None,
) -> CheckReport:
    """Run fn on the variant cases and compare each output with scratch.flex_attention's.

    fn(q, k, v, **keywords) gets q (1, H, L, E), k, v (1, Hkv, S, E / Ev) and the case's
    variant as FlashAttention's keywords (variant_style='flash': causal, window_size, softcap,
    alibi_slopes, sinks, cu_seqlens_q / cu_seqlens_k, attention_chunk) or FlexAttention's
    (variant_style='flex': mask_mod, score_mod, sinks); RoPE cases add rotary_cos, rotary_sin,
    rotary_interleaved. The style is read from fn's parameters when not given. `require`
    (e.g. "window,softcap") turns refused cases of those features into failures.
    """
    style, dtype, required, arrays = variant_settings(
        fn, "fn", variant_style, array, dtype, device, seed, require
    )
    settings = (
        f"variant_style={style}, array={array}, dtype={dtype}, device={device or 'default'}, "
        f"seed={seed}" + (f", require={','.join(required)}" if required else "")
    )
    report = CheckReport(target_name(fn), settings)
    accepts = accepted_keywords(fn)
    run_all(
        report,
        variant_cases(dtype),
        progress,
        lambda c: run_case(fn, c, arrays, dtype, seed, style, accepts),
    )
    return finish(report, required)


def variant_settings(fn, name: str, style, array, dtype, device, seed, require) -> tuple:
    """(style, dtype, required features, Arrays), or a ValueError/TypeError naming the setting."""
    if not callable(fn):
        raise TypeError(
            f"{name}: expected a callable attention function, found {type(fn).__name__}"
        )
    style = style_of(fn, style)
    dtype, _ = check_settings(array, ARRAYS, "standard", ("standard",), seed, device, dtype, "zero")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype: the variant checker takes float32 or float64, found {dtype!r}")
    required = check_require(require, tuple(VARIANT_FEATURES))
    arrays = Arrays(array, device)
    arrays.check_device()
    return style, dtype, required, arrays


def start_variant_case(
    case: VariantCase, prep, arrays: Arrays, dtype: str, style: str, accepts
) -> tuple[CaseResult, dict | None]:
    """A variant case's result and the keywords of fn's style for it; None instead of the
    keywords (the result 'unsupported', saying why) when fn cannot be given the variant."""
    result = CaseResult(
        case.name, shape_text(case.q, case.k, case.v), case.options(), dtype, "fail"
    )
    result.features = case.features()
    try:
        kw = keywords(case, prep, arrays, dtype, style, accepts)
    except NoKeyword as exc:
        result.status, result.message = "unsupported", str(exc)
        return result, None
    missing = [w for w in kw if accepts is not None and w not in accepts]
    if missing:
        result.status, result.message = "unsupported", f"fn takes no {missing[0]} keyword"
        return result, None
    return result, kw


def run_case(fn, case: VariantCase, arrays: Arrays, dtype: str, seed: int, style: str, accepts):
    """One case: the keywords of fn's style, the call, the comparison, a diagnosis."""
    prep = prepare_variant(case, dtype, seed)
    result, kw = start_variant_case(case, prep, arrays, dtype, style, accepts)
    if kw is None:
        return result
    d = prep.data
    args = tuple(arrays.make(x.tolist(), dtype) for x in (d.q, d.k, d.v))
    try:
        out, _ = call(fn, args, kw)
    except BadResult as exc:
        result.message = str(exc)
        return result
    except Exception as exc:  # the kernel's own error: a failure, or NotImplementedError
        return kernel_raised(result, exc, arrays.array, fn, kw)
    try:
        got = np.asarray(arrays.floats(out), dtype=np.float64)
    except (TypeError, ValueError, AttributeError) as exc:  # None, a string, ragged lists...
        result.message = f"fn's result is not an array of numbers: {type(out).__name__} ({exc})"
        return result
    expected = prep.truth.shape
    if got.shape != expected:
        result.message = f"output shape {got.shape}, expected {expected} (1, H, L, Ev)"
        return result
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - prep.truth)
    result.max_error = float(np.max(diff)) if np.all(np.isfinite(diff)) else float("inf")
    result.bound = prep.allowed
    result.ratio = result.max_error / prep.allowed if prep.allowed > 0 else float("inf")
    result.diff = diff.tolist()
    if result.ratio <= 1.0:
        result.status = "pass"
        return result
    result.message = (
        f"max error {result.max_error:.3g} > allowed {prep.allowed:.3g} ({2:g}x the largest "
        f"error of the correct reference {dtype} kernels, {prep.reference:.3g}, + 4 ulps)"
    )
    result.diagnosis = diagnose(prep, got, style)
    return result


__all__ = ["check_variants"]
