"""What the window asks of scratch beyond its public names: a few compositions of them (the
presets' words, the backends' dtypes, the registry's words for a step, the backward's options),
and, until the models' rework reaches them, the model heads' knowledge. The window imports
scratch's public API directly (tests/test_public_api.py reads the imports)."""

from __future__ import annotations

import scratch
from scratch import backends, presets, steps
from scratch.variants import Causal, VariantChoice, causal_shift


def preset_title(name: str) -> str:
    """The preset's one-line title ('Seed 003: "Your journey starts ..."')."""
    return str(presets.get(name).title)


def preset_notes(name: str) -> list[str]:
    """The preset's notes (slips included), then what the notebook printed where it slipped."""
    preset = presets.get(name)
    return [str(n) for n in preset.notes] + preset.slip_notes()


def backend_dtypes() -> dict[str, tuple[str, ...]]:
    """{backend name: dtype names} for every entry of scratch.backends.available()."""
    return {name: tuple(backends.get(name).dtypes) for name in backends.available()}


def trace_with_backend(
    name: str, dtype: str, example: scratch.Example, options: scratch.Options, on_projected=None
) -> object:
    """backend(name).trace_example(example, options, dtype=dtype): the ground truth for 'scratch'.

    on_projected: None, or called with (q, k, v, scale) once the projections exist, before
    attention (the arrays the trace will hold)."""
    backend = backends.get(name)
    return backend.trace_example(example, options, dtype=dtype, on_projected=on_projected)


def causal_variant(L: int, S: int, align: str) -> object:
    """scratch.variants.Causal for L queries and S keys aligned 'top-left' or 'bottom-right':
    its .cells(rows, cols) are the grid's, .shift its diagonal, .rule() its words."""
    return Causal(causal_shift(L, S, align))


def variant_cells(choice: VariantChoice, L: int, S: int, H: int, rows, cols) -> list | None:
    """Rows `rows` and columns `cols` of the choice's mask (head 0's: the picture), asked of its
    mask_mod; None when the choice has no mask (or does not fit: the picker says why)."""
    try:
        variant = choice.variant(L, S, H)
    except ValueError:
        return None
    if variant is None or variant.mask_mod is None:
        return None
    return [[bool(variant.mask_mod(0, 0, i, j)) for j in cols] for i in rows]


def step_stages(names: list[str]) -> list[tuple[int, str]]:
    """(step number, arrow text) of each step name, from scratch's registry of steps."""
    call = steps.call_of_names(names)
    return [(steps.spec_for(call, n).number, steps.arrow_of(call, n)) for n in names]


def step_reads(trace: object, step: str) -> tuple[str, ...]:
    """The steps `step` reads, from its entry in scratch's registry of steps."""
    call = steps.call_of(trace)
    return steps.spec_for(call, step).reads(call)


def step_heading(trace_names: list[str], names: list[str], step: str) -> str:
    """scratch.steps.heading: 'step 2: scores (5/9)', as the terminal heads the step; the call
    is read from all the trace's steps (`names`, the steps shown, may leave out w_q)."""
    return steps.heading(steps.call_of_names(trace_names), names, step)


def sentence_kind(names: list[str], step: str) -> str:
    """The kind of sentence the window writes about `step` (gui.sentences.KINDS), from the
    registry entry of that step among steps `names`; "" for none."""
    return steps.spec_for(steps.call_of_names(names), step).sentence


# ---------------------------------------------------------------- the backward pass


def backward_steps(trace: object) -> list[str]:
    """The names of the trace's backward steps (dO onwards), in trace order."""
    call = steps.call_of(trace)
    return [n for n in trace.names() if steps.spec_for(call, n).backward]


BACKWARD_OPTIONS = ("attn_mask", "is_causal", "scale", "enable_gqa", "masked_rows")


def _keywords(options: scratch.Options) -> dict:
    """`options` as the keywords of the backward functions (PyTorch's names; no dropout)."""
    return {name: getattr(options, name) for name in BACKWARD_OPTIONS}


def backward_with_backend(
    name: str, dtype: str, q, k, v, grad_output, options: scratch.Options
) -> tuple:
    """Backend `name`'s scaled_dot_product_attention_backward in `dtype`: (dq, dk, dv)."""
    fn = backends.get(name).scaled_dot_product_attention_backward
    if name == "scratch":  # the ground truth has one dtype and no dtype argument
        return fn(q, k, v, grad_output, **_keywords(options))
    return fn(q, k, v, grad_output, **_keywords(options), dtype=dtype)


def ground_truth_backward(q, k, v, grad_output, options: scratch.Options) -> tuple:
    """scratch.scaled_dot_product_attention_backward: the exact (dq, dk, dv)."""
    return scratch.scaled_dot_product_attention_backward(q, k, v, grad_output, **_keywords(options))


def gradient_bound(q, k, v, grad_output, options: scratch.Options, dtype: str) -> object:
    """scratch.gradient_tolerance: per-element bounds on every gradient."""
    return scratch.gradient_tolerance(q, k, v, grad_output, **_keywords(options), dtype=dtype)


# ---------------------------------------------------------------- checker, models, threads


def check_features() -> list[str]:
    """The features `require` may name (scratch.checker.cases.FEATURES), dropout last."""
    return [*scratch.checker.FEATURES, "dropout"]


def start_model(path: str | None, text: str, progress: object = None) -> object:
    """A decoder's Decoding of `text` (scratch.models.start: the prompt run, its cache kept for
    Decoding.extend), or model.run(text) for a model without an output head; the load (of
    scratch.models.load(path), None for the default model; ImportError without NumPy,
    safetensors or tokenizers, its .name says which) and the run report to `progress` (a
    scratch.Progress: stages, Cancel)."""
    from scratch import models

    with scratch.reporting(progress):
        model = models.load(path)
        decoder = getattr(model, "decoder", False)
        return models.start(model, text) if decoder else model.run(text)


def kv_heads_of(model: object) -> list[int]:
    """The key/value head each query head reads (the model's Family record: grouped-query
    attention); BERT's and GPT-2's heads each read their own."""
    return model.family_record.kv_heads(model.config)


def decoder_head(model: object, layer: int, head: int) -> tuple[dict, VariantChoice]:
    """A decoder's head as the window computes it: its w_q and its key/value head's w_k, w_v
    (the family's head_weights, (d_model, d_head) each), and the variant the model applies
    after the projections: causal with RoPE (the Family record's pairing, the model's base)."""
    model.check_head(layer, head)
    family = model.family_record
    rope = VariantChoice(
        mask="causal",
        align="top-left",
        rope=family.pairing,
        rope_base=float(model.config.rope_base),
    )
    return family.module().head_weights(model.config, model.weights, layer, head), rope


# ---------------------------------------------------------------- learn: why, mistakes, tiles


def why(scores, scaled, masked, d_k: int, row: int, allowed=None) -> tuple:
    """scratch.why's three reasons on one row: (why_scale at 1/sqrt(d_k), why_max, why_mask)."""
    from scratch import why as w  # a public module of scratch: the learn tab's reasons

    return (
        w.why_scale(scores, 1.0 / d_k**0.5, d_k, row, allowed),
        w.why_max(masked, row),
        w.why_mask(scaled, row, allowed),
    )
