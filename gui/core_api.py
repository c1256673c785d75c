"""The window's only door into scratch: presets, backends, traces, explain, compare_traces, the
bounds, the checker and the models. No other gui module (nor main.py) imports scratch
(tests/test_import_graph.py checks it), so what the window uses of scratch is listed here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import scratch
from scratch import backends, presets, steps

# names the window uses as scratch defines them, passed through unchanged
from scratch.compare import StepCheck as StepCheck
from scratch.example import Example as Example
from scratch.options import Options as Options
from scratch.progress import Cancelled as Cancelled
from scratch.progress import Progress as Progress
from scratch.rows import attention_rows as attention_rows
from scratch.rows import sample_rows as sample_rows
from scratch.tolerance import tolerance as tolerance
from scratch.trace import trace_example
from scratch.variant_support import as_sdpa as as_sdpa
from scratch.variant_support import sdpa_variant as sdpa_variant
from scratch.variants import GivenMask as GivenMask
from scratch.variants import VariantChoice as VariantChoice
from scratch.variants import causal
from scratch.weights_tolerance import weights_tolerance as weights_tolerance


def preset_names() -> list[str]:
    """Every preset of scratch.presets."""
    return list(presets.names())


def get_preset(name: str) -> object:
    """scratch.presets.get(name); KeyError for an unknown name."""
    if name not in preset_names():
        raise KeyError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")
    return presets.get(name)


def preset_title(name: str) -> str:
    """The preset's one-line title ('Seed 003: "Your journey starts ..."')."""
    return str(get_preset(name).title)


def preset_notes(name: str) -> list[str]:
    """The preset's notes (slips included), then what the notebook printed where it slipped."""
    preset = get_preset(name)
    return [str(n) for n in preset.notes] + preset.slip_notes()


def backend_dtypes() -> dict[str, tuple[str, ...]]:
    """{backend name: dtype names} for every entry of scratch.backends.available()."""
    return {name: tuple(backends.get(name).dtypes) for name in backends.available()}


def trace_with_backend(
    name: str, dtype: str, example: Example, options: Options, on_projected=None
) -> object:
    """backend(name).trace_example(example, options, dtype=dtype): the ground truth for 'scratch'.

    on_projected: None, or called with (q, k, v, scale) once the projections exist, before
    attention (the arrays the trace will hold)."""
    backend = backends.get(name)
    return backend.trace_example(example, options, dtype=dtype, on_projected=on_projected)


def ground_truth(example: Example, options: Options) -> object:
    """scratch's trace_example, the exact reference every backend is checked against."""
    return trace_example(example, options)


def plan_heads(query: tuple, key: tuple | None, value: tuple | None, **kwargs) -> object:
    """scratch.plan.plan_multi_head on shapes: the head rules and messages every backend uses."""
    return scratch.plan.plan_multi_head(query, key, value, **kwargs)


def shapes_for_heads(L: int, S: int, heads: tuple, d_head: int, d_v: int, inputs=None) -> dict:
    """scratch.plan.shapes_for_heads: the matrices' shapes for heads this wide."""
    return scratch.plan.shapes_for_heads(L, S, heads, d_head, d_v, inputs)


def causal_variant(L: int, S: int, align: str) -> object:
    """scratch.variants.Causal for L queries and S keys aligned 'top-left' or 'bottom-right':
    its .cells(rows, cols) are the grid's, .shift its diagonal, .rule() its words."""
    return causal.Causal(causal.causal_shift(L, S, align))


def causal_cells(L: int, S: int, align: str, rows=None, cols=None) -> list[list[bool]]:
    """scratch.variants.causal.causal_cells: rows `rows` and columns `cols` of the causal grid."""
    return causal.causal_cells(L, S, align, rows, cols)


def decode_example(example: Example, n: int) -> Example:
    """scratch.decode_view.decode_example: decode step n (the newest token, n cached keys)."""
    from scratch.decode_view import decode_example as step

    return step(example, n)


def mask_rule(variant: object) -> str:
    """The words a trace's masked step gives a variant's mask rule (scratch.trace.variant_words);
    '' for None or a variant without a mask."""
    from scratch.trace import variant_words
    from scratch.variant_steps import pieces

    return variant_words(pieces(Options(variant=variant)))["rule"] if variant is not None else ""


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


def variant_rows_call(options: Options, rows: list[int], L: int, S: int, scale: float) -> object:
    """scratch.variant_rows.rows_call: how the ground truth computes a variant's sampled rows
    (its mask and score parts' own rules, a given attn_mask's sampled rows)."""
    from scratch.variant_rows import rows_call

    return rows_call(options, rows, L, S, scale)


def is_rows_call(options: object) -> bool:
    """Whether `options` is a variant's RowsCall (else attention_rows' Options)."""
    from scratch.variant_rows import RowsCall

    return isinstance(options, RowsCall)


def variant_rows(q: list, k: list, v: list, call: object) -> dict:
    """scratch.variant_rows.variant_rows: the ground truth's steps of a variant's sampled rows."""
    from scratch.variant_rows import variant_rows as rows_of

    return rows_of(q, k, v, call)


def compare_variant_rows(trace: object, rows: list[int], truth: dict, dtype: str) -> list:
    """scratch.variant_rows.compare_rows: the trace's sampled rows of every variant step
    against the ground truth's, each within its own bound."""
    from scratch.variant_rows import compare_rows

    return compare_rows(trace, rows, truth, dtype)


def explain(trace: object, step: str, index: tuple[int, ...]) -> object:
    """scratch.explain(trace, step, index) -> Explanation with .text and .sources."""
    return scratch.explain(trace, step, tuple(index))


def compare(trace: object, reference: object) -> list:
    """scratch.compare_traces(trace, reference): one StepCheck per step."""
    return scratch.compare_traces(trace, reference)


def step_stages(names: list[str]) -> list[tuple[int, str]]:
    """(step number, arrow text) of each step name, from scratch's registry of steps."""
    call = steps.call_of_names(names)
    return [(steps.spec_for(call, n).number, steps.arrow_of(call, n)) for n in names]


def step_heading(trace_names: list[str], names: list[str], step: str) -> str:
    """scratch.steps.heading: 'step 2: scores (5/9)', as the terminal heads the step; the call
    is read from all the trace's steps (`names`, the steps shown, may leave out w_q)."""
    return steps.heading(steps.call_of_names(trace_names), names, step)


def sentence_kind(names: list[str], step: str) -> str:
    """The kind of sentence the window writes about `step` (gui.sentences.KINDS), from the
    registry entry of that step among steps `names`; "" for none."""
    return steps.spec_for(steps.call_of_names(names), step).sentence


# ---------------------------------------------------------------- the backward pass


def backward_trace(grad_output: list, example: Example, options: Options) -> object:
    """scratch's trace_example(..., grad_output=dO): the forward steps, then the backward's."""
    return trace_example(example, options, grad_output=grad_output)


def backward_steps(trace: object) -> list[str]:
    """The names of the trace's backward steps (dO onwards), in trace order."""
    call = steps.call_of(trace)
    return [n for n in trace.names() if steps.spec_for(call, n).backward]


def make_grad_output(kind: str, rows: int, cols: int, **options) -> list[list[float]]:
    """scratch.grad_output.make_grad_output."""
    from scratch.grad_output import make_grad_output

    return make_grad_output(kind, rows, cols, **options)


def one_hot(rows: int, cols: int, i: int, c: int) -> list[list[float]]:
    """scratch.grad_output.one_hot."""
    from scratch.grad_output import one_hot

    return one_hot(rows, cols, i, c)


BACKWARD_OPTIONS = ("attn_mask", "is_causal", "scale", "enable_gqa", "masked_rows")


def _keywords(options: Options) -> dict:
    """`options` as the keywords of the backward functions (PyTorch's names; no dropout)."""
    return {name: getattr(options, name) for name in BACKWARD_OPTIONS}


def backward_with_backend(name: str, dtype: str, q, k, v, grad_output, options: Options) -> tuple:
    """Backend `name`'s scaled_dot_product_attention_backward in `dtype`: (dq, dk, dv)."""
    fn = backends.get(name).scaled_dot_product_attention_backward
    if name == "scratch":  # the ground truth has one dtype and no dtype argument
        return fn(q, k, v, grad_output, **_keywords(options))
    return fn(q, k, v, grad_output, **_keywords(options), dtype=dtype)


def ground_truth_backward(q, k, v, grad_output, options: Options) -> tuple:
    """scratch.scaled_dot_product_attention_backward: the exact (dq, dk, dv)."""
    return scratch.scaled_dot_product_attention_backward(q, k, v, grad_output, **_keywords(options))


def gradient_bound(q, k, v, grad_output, options: Options, dtype: str) -> object:
    """scratch.grad_tolerance.gradient_tolerance: per-element bounds on every gradient."""
    from scratch.grad_tolerance import gradient_tolerance

    return gradient_tolerance(q, k, v, grad_output, **_keywords(options), dtype=dtype)


def compare_gradient(computed, truth, bound) -> object:
    """scratch.grad_tolerance.compare: within the bound, NaN exactly where the truth has it."""
    from scratch.grad_tolerance import compare

    return compare(computed, truth, bound)


# ---------------------------------------------------------------- checker, models, threads


def load_kernel(source: str) -> Callable:
    """scratch.checker.cli.load: the function named by "file.py:function" or "module:function"."""
    from scratch.checker.cli import load

    return load(source)


def check_kernel(fn: Callable, **options) -> object:
    """scratch.check(fn, **options) -> CheckReport (needs NumPy)."""
    from scratch.checker import check

    return check(fn, **options)


def check_backward_kernel(forward: Callable | None, backward: Callable | None, **options) -> object:
    """scratch.checker.check_backward(forward, backward=backward, **options) -> CheckReport."""
    from scratch.checker import check_backward

    return check_backward(forward, backward=backward, **options)


def check_features() -> list[str]:
    """The features `require` may name (scratch.checker.cases.FEATURES), dropout last."""
    from scratch.checker.cases import FEATURES

    return [*FEATURES, "dropout"]


def load_model(path: str | None) -> object:
    """scratch.models.load(path), None for the default model; ImportError without NumPy,
    safetensors or tokenizers (its .name says which)."""
    from scratch import models

    return models.load(path)


def start_model(path: str | None, text: str, progress: object = None) -> object:
    """A decoder's Decoding of `text` (scratch.models.decoding.start: the prompt run, its cache
    kept for Decoding.extend), or model.run(text) for a model without an output head; the load
    and the run report to `progress` (a scratch.progress.Progress: stages, Cancel)."""
    from scratch import progress as progress_
    from scratch.models import decoding

    with progress_.reporting(progress):
        model = load_model(path)
        decoder = getattr(model, "decoder", False)
        return decoding.start(model, text) if decoder else model.run(text)


def kv_heads_of(model: object) -> list[int]:
    """The key/value head each query head reads (the model's Family record: grouped-query
    attention); BERT's and GPT-2's heads each read their own."""
    return model.family_record.kv_heads(model.config)


def token_name(tokenizer: object, i: int) -> str:
    """scratch.models.run.token_name: token i as text, a special token by its name."""
    from scratch.models.run import token_name as name

    return name(tokenizer, i)


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


def model_block(run: object, layer: int) -> object:
    """scratch.models.block.block: layer `layer` of a run step by step, checked against it."""
    from scratch.models.block import block

    return block(run, layer)


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """scratch.backends.numpy_threads.single_threaded_blas; nothing to hold without NumPy."""
    try:
        from scratch.backends.numpy_threads import single_threaded_blas as one_thread
    except ImportError:
        yield
        return
    with one_thread():
        yield


# ---------------------------------------------------------------- learn: why, mistakes, tiles


def why(scores, scaled, masked, d_k: int, row: int, allowed=None) -> tuple:
    """scratch.why's three reasons on one row: (why_scale at 1/sqrt(d_k), why_max, why_mask)."""
    from scratch import why as w

    return (
        w.why_scale(scores, 1.0 / d_k**0.5, d_k, row, allowed),
        w.why_max(masked, row),
        w.why_mask(scaled, row, allowed),
    )


def online_softmax(q, k, v, scale: float, allowed, block: int, dtype: str) -> object:
    """scratch.online_softmax.online_softmax: the key tiles' running values."""
    from scratch.online_softmax import online_softmax as walk

    return walk(q, k, v, scale=scale, allowed=allowed, block=block, dtype=dtype)


def mistake_names() -> tuple[str, ...]:
    """The planted mistakes, in the gallery's order (scratch.mistakes.NAMES)."""
    from scratch.mistakes import NAMES

    return NAMES


def plant_mistake(name: str, q, k, v, scale: float, allowed=None) -> object:
    """scratch.mistakes.plant: the right and the wrong weights and output of one example."""
    from scratch.mistakes import plant

    return plant(name, q, k, v, scale, allowed)


def diagnose_mistake(name: str) -> object:
    """scratch.mistakes.diagnose: scratch.check on the kernel with that mistake."""
    from scratch.mistakes import diagnose

    return diagnose(name)
