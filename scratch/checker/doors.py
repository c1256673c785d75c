"""scratch.check, check_backward, check_variants and check_variants_backward: the settings
checked, the kind of case chosen, and the one runner (run.py) run over the cases."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace

from scratch.bounds.tolerance import check_dtype
from scratch.checker.arrays import ARRAYS, Arrays
from scratch.checker.cases import BACKWARD_FEATURES, CASE_SETS, FEATURES, cases_for
from scratch.checker.interpreter import interpreter_notes
from scratch.checker.report import CheckReport
from scratch.checker.run import Kind, Progress, finish, run_case, run_checks, target_name
from scratch.core.front_doors import arguments_for, with_arguments
from scratch.ops.validate import check_choice, check_masked_rows

BACKWARD_ARRAYS = ("numpy", "torch")


@dataclass(frozen=True)
class Plan:
    """A check before it runs: the kind of case (the kernel, arrays, dtype and seed in it), its
    cases, the report's head, the features a case may not decline, and who hears of progress."""

    kind: Kind
    target: str
    settings: str
    cases: list
    required: tuple[str, ...] = ()
    progress: Progress = None

    def run(self) -> CheckReport:
        """Every case by the one runner into one report."""
        return run_checks(
            self.kind, self.target, self.settings, self.cases, self.progress, self.required
        )

    def run_one(self, case) -> CheckReport:
        """One case by the one runner, finished as a report of its own (scratch.testing: one
        test per case); a name kept only when true of every case (an ignored keyword,
        ignored.py) is judged on this case alone."""
        notes = interpreter_notes(self.kind.fn, self.kind.dtype)
        report = CheckReport(self.target, self.settings, [run_case(self.kind, case)], notes=notes)
        return finish(report, self.required)


SETTINGS = """The keywords the doors share, described once: each door's docstring has its own.

    Args:
        array: the arrays fn gets and returns: "numpy", "torch" or "list" (nested lists).
        dtype: the inputs' dtype: "float32", "float64", "float16" or "bfloat16".
        device: the torch device, e.g. "cuda"; None: the default.
        cases: the case set: "standard", "full", "large" (4096 tokens, sampled rows) or "medium".
        seed: the cases' seed.
        masked_rows: what fn gives a row with no visible key: "zero", "nan" or "uniform".
        require: features fn must support (a tuple or "mask,causal"): a case fn refuses for one
            of them fails instead of counting as unsupported.
        progress: a scratch.ops.progress.Progress told of each case done (it can cancel), or None.
    """


def door(plan: Callable[..., Plan]) -> Callable[..., CheckReport]:
    """A check: `plan`'s arguments, its Plan run into a CheckReport. `check.plan` (the function
    undecorated) returns the Plan, to run its cases one by one (scratch.testing)."""
    arguments = arguments_for(inspect.signature(plan).parameters, plan.__doc__, SETTINGS)

    @functools.wraps(plan)
    def check(*args, **kwargs) -> CheckReport:
        return plan(*args, **kwargs).run()

    check.__signature__ = inspect.signature(plan).replace(return_annotation="CheckReport")
    check.__doc__ = with_arguments(plan.__doc__, arguments, replace=True)
    check.plan = plan
    return check


def checked_cases(kind: str, dtype: str, cases: str = "standard", interface: bool = False) -> list:
    """The cases a door runs: kind 'forward' (the set `cases`), 'backward', 'variants' or
    'variants-backward' (with `interface`: FlashAttention's own interface's too); dtype already
    checked."""
    if kind == "forward":
        return cases_for(cases, dtype)
    if kind == "backward":
        from scratch.checker.cases import backward_cases

        return backward_cases(dtype)
    from scratch.checker.variant_cases import variant_cases

    backward = kind == "variants-backward"
    return [replace(c, grad_output=backward) for c in variant_cases(dtype, interface)]


@door
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
) -> Plan:
    """Run fn on seeded cases and compare each output with the float64 ground truth.

    Sampled rows of 4096-token cases in 16/32-bit dtypes are compared with the ground truth's
    float64 NumPy stand-in (float64_rows.py).

    fn(q, k, v, attn_mask=..., is_causal=..., scale=..., enable_gqa=...) gets only the keywords a
    case needs and returns the output or (output, weights). `require` (e.g. ("mask", "causal"))
    turns cases fn refuses for those features into failures. See the README's checker section.

    A kernel named or parameterised like FlashAttention's flash_attn_func or
    flash_attn_varlen_func (softmax_scale; max_seqlen_q) is checked as check_variants checks it
    in that style (its layout, its keywords, bottom-right causal), on the standard variant cases
    (none leaves a row without keys, so masked_rows does not matter there).

    Args:
        fn: the attention function, q (..., L, E), k (..., S, E), v (..., S, Ev) in the
            array type `array` -> output (..., L, Ev) or (output, weights (..., L, S)).

    Returns:
        The CheckReport: one row per case, truthy when no case fails; `.diagnosis` names
        the mistake a failure looks like.

    Examples:
        >>> import scratch
        >>> report = scratch.check(scratch.backends.get("numpy").scaled_dot_product_attention)
        >>> bool(report), report.diagnosis
        (True, None)
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable attention function, found {type(fn).__name__}")
    from scratch.checker.variant_layout import interface_of

    style = interface_of(fn)
    if style is not None:  # FlashAttention's own interface: the variant cases in its style
        if cases != "standard":
            raise ValueError(
                f"cases: fn takes FlashAttention's interface ({style}), checked on the standard "
                f"variant cases only; found cases={cases!r}"
            )
        return check_variants.plan(
            fn, variant_style=style, array=array, dtype=dtype, device=device, seed=seed,
            require=require, progress=progress,
        )  # fmt: skip
    dtype, masked_rows = check_settings(
        array, ARRAYS, cases, CASE_SETS, seed, device, dtype, masked_rows
    )
    required = check_require(require)
    if cases in ("large", "medium") and array == "list":
        raise ValueError(
            f"cases: {cases!r} needs array='numpy' or 'torch' (1024- and 4096-token lists are slow)"
        )
    arrays = Arrays(array, device)
    arrays.check_device()
    from scratch.checker.forward import Forward

    kind = Forward(fn, arrays, dtype, seed, masked_rows=masked_rows)
    settings = settings_line(
        array=array, dtype=dtype, device=device or "default", cases=cases, seed=seed,
        masked_rows=masked_rows, require=",".join(required),
    )  # fmt: skip
    cases = checked_cases("forward", dtype, cases)
    return Plan(kind, target_name(fn), settings, cases, required, progress)


@door
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
) -> Plan:
    """Run a backward kernel on seeded cases and compare dq, dk, dv with the float64 ground truth.

    The kernel checked is `backward` when given (fn is then the forward it belongs to, named in
    the report, or None); else with array='torch' fn is a forward function differentiated by
    torch.autograd.grad with the case's seeded dO, and with array='numpy' fn is the backward.
    A backward is called as backward(q, k, v, grad_output, attn_mask=..., is_causal=...,
    scale=..., enable_gqa=..., dropout_p=..., dropout_mask=...) with only the keywords a case
    needs (dropout_mask: the forward's kept entries, True = kept) and returns (dq, dk, dv).

    Args:
        fn: the forward (array="torch": differentiated by torch.autograd.grad; with
            `backward`: only named in the report, or None), or with array="numpy" the backward.
        backward: the backward kernel to check, or None (see fn).

    Returns:
        The CheckReport of dq, dk and dv.
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
    from scratch.checker.backward_run import Backward, backward_kernel

    kernel, target = backward_kernel(fn, backward, array)
    kind = Backward(kernel, arrays, dtype, seed, masked_rows=masked_rows)
    settings = settings_line(
        "backward", array=array, dtype=dtype, device=device or "default", cases=cases,
        seed=seed, masked_rows=masked_rows, require=",".join(required),
    )  # fmt: skip
    return Plan(kind, target, settings, checked_cases("backward", dtype), required, progress)


@door
def check_variants(
    fn: Callable,
    *,
    variant_style: str | None = None,
    array: str = "numpy",
    dtype: object = "float32",
    device: object = None,
    seed: int = 0,
    require: object = (),
    lse_base: object = "e",
    progress: Progress = None,
) -> Plan:
    """Run fn on the variant cases and compare each output with scratch.flex_attention's.

    fn(q, k, v, **keywords) gets q (1, H, L, E), k, v (1, Hkv, S, E / Ev) and the case's
    variant as FlashAttention's keywords (variant_style='flash': causal, window_size, softcap,
    alibi_slopes, sinks, cu_seqlens_q / cu_seqlens_k, attention_chunk) or FlexAttention's
    (variant_style='flex': mask_mod, score_mod, sinks); RoPE cases add rotary_cos, rotary_sin,
    rotary_interleaved. The style is read from fn's parameters when not given. `require`
    (e.g. "window,softcap") turns refused cases of those features into failures. An lse fn
    returns beside its output ((out, lse) (1, H, L); FlashAttention's softmax_lse) is checked
    too, as a natural log, or in base 2 with lse_base=2.

    Args:
        fn: the variant kernel, fn(q, k, v, **keywords) -> output (1, H, L, Ev) or
            (output, lse).
        variant_style: "flash", "flex", "flash_attn" or "flash_attn_varlen"; None: read
            from fn's parameters.
        lse_base: the base of fn's lse: "e" (or e) or 2.

    Returns:
        The CheckReport of the variant cases.
    """
    return _variants(
        fn, "fn", variant_style, array, dtype, device, seed, require, progress, lse_base
    )


@door
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
) -> Plan:
    """Run backward on the variant cases and compare its gradients with the exact ones.

    backward(q, k, v, grad_output, **keywords) -> (dq, dk, dv), or (dq, dk, dv, dsinks) in cases
    with sinks; the keywords as check_variants gives them (either style).

    Args:
        backward: the variant backward kernel.
        variant_style: "flash" or "flex" (as check_variants); None: read from its parameters.

    Returns:
        The CheckReport of the variant cases' gradients.
    """
    return _variants(
        backward, "backward", variant_style, array, dtype, device, seed, require, progress
    )


def _variants(fn, name, style, array, dtype, device, seed, require, progress, base="e") -> Plan:
    """check_variants (name 'fn') or check_variants_backward (name 'backward')."""
    if not callable(fn):
        raise TypeError(
            f"{name}: expected a callable attention function, found {type(fn).__name__}"
        )
    from scratch.checker.variant_cases import VARIANT_FEATURES
    from scratch.checker.variant_keywords import style_of
    from scratch.checker.variant_layout import INTERFACE
    from scratch.checker.variant_run import Variant, VariantBackward

    style = style_of(fn, style)
    dtype, _ = check_settings(array, ARRAYS, "standard", ("standard",), seed, device, dtype, "zero")
    required = check_require(require, tuple(VARIANT_FEATURES))
    arrays = Arrays(array, device)
    arrays.check_device()
    backward = name == "backward"
    kind = (VariantBackward if backward else Variant)(
        fn, arrays, dtype, seed, style=style, lse_base=base
    )
    interface = style in INTERFACE  # FlashAttention's own: a scale keyword, a batch axis
    cases = checked_cases(
        "variants-backward" if backward else "variants", dtype, interface=interface
    )
    if backward:
        settings = settings_line(
            "backward", variant_style=style, array=array, dtype=dtype, seed=seed
        )
    else:
        settings = settings_line(
            variant_style=style, array=array, dtype=dtype, device=device or "default",
            seed=seed, require=",".join(required), lse_base="" if kind.lse_base == "e" else 2,
        )  # fmt: skip
    return Plan(kind, target_name(fn), settings, cases, required, progress)


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
    check_choice(array, "array", arrays)
    check_choice(cases, "cases", case_sets)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, found {type(seed).__name__} {seed!r}")
    if device is not None and array != "torch":
        raise ValueError(f"device: only meaningful with array='torch', found array={array!r}")
    dtype = check_dtype(dtype)
    if dtype == "bfloat16" and array == "numpy":
        raise ValueError(
            "dtype: numpy has no bfloat16 (array='numpy', dtype='bfloat16'); use array='torch' "
            "for bfloat16"
        )
    return dtype, check_masked_rows(masked_rows)


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


__all__ = [
    "Plan",
    "check",
    "check_backward",
    "check_variants",
    "check_variants_backward",
    "checked_cases",
]
