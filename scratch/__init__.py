"""scratch: Transformer attention from scratch, exact, in plain Python.

The ground truth: scaled dot-product attention, masks, multi-head and grouped-query attention on
nested lists, every sum correctly rounded with math.fsum, with the argument names and semantics
of `torch.nn.functional.scaled_dot_product_attention`. Standard library only.
"""

from scratch.backward.grad_output import make_grad_output, one_hot
from scratch.backward.multihead import MultiHeadGradients, multi_head_attention_backward
from scratch.backward.sdpa import scaled_dot_product_attention_backward
from scratch.bounds.grad_tolerance import gradient_tolerance
from scratch.bounds.tolerance import tolerance
from scratch.checker import CheckReport, check
from scratch.core.attention import scaled_dot_product_attention
from scratch.core.example import Example
from scratch.core.masks import causal_mask
from scratch.core.multihead import multi_head_attention
from scratch.core.options import Options
from scratch.core.rows import attention_rows, sample_rows
from scratch.core.variant_support import as_sdpa, sdpa_variant
from scratch.decode.attention import decode_attention
from scratch.decode.example import decode_example
from scratch.decode.kv_cache import KVCache
from scratch.decode.paged import paged_decode_attention
from scratch.decode.split_kv import merge_partials, split_kv_attention
from scratch.flex.backward import flex_attention_backward
from scratch.flex.forward import BlockMask, create_block_mask, flex_attention
from scratch.ops.linalg import matmul, transpose
from scratch.ops.plan import plan_multi_head, shapes_for_heads
from scratch.ops.progress import Cancelled, Progress, reporting
from scratch.ops.rope import rotary, rotary_backward
from scratch.ops.softmax import softmax
from scratch.ops.validate import MASKED_ROWS, as_tensor
from scratch.trace.compare import StepCheck, compare_traces, step_check
from scratch.trace.explain import Explanation, explain
from scratch.trace.forward import Step, Trace, mask_rule, trace_attention, trace_example

# Subpackages and modules reached as attributes after a plain `import scratch`, imported on
# first use so that `import scratch` itself stays standard-library only.
_LAZY = {
    "backends": ".backends",
    "bench": ".bench",
    "checker": ".checker",
    "models": ".models",
    "presets": ".learn.presets",
}
# functions that need numpy, imported from their module on first use
_LAZY_FUNCTIONS = {
    "check_backward": ".checker.doors",
    "check_variants": ".checker.doors",
    "check_variants_backward": ".checker.doors",
}


def __getattr__(name: str) -> object:
    """scratch.presets, scratch.backends, ...: import the submodule on first access."""
    import importlib

    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    if name in _LAZY_FUNCTIONS:
        return getattr(importlib.import_module(_LAZY_FUNCTIONS[name], __name__), name)
    raise AttributeError(f"module 'scratch' has no attribute {name!r}")


def __dir__() -> list[str]:
    """Public names plus the lazily imported submodules."""
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_FUNCTIONS))


def shape_of(nested: object) -> tuple[int, ...]:
    """Shape of a regular nested list (or array); ValueError/TypeError if it is not one.

    Args:
        nested: a number's nested lists (at least one level), or an array.

    Returns:
        The shape, one length per level.

    Examples:
        >>> import scratch
        >>> scratch.shape_of([[1, 2, 3], [4, 5, 6]])
        (2, 3)
    """
    return as_tensor(nested, "nested", min_dims=1)[1]


__all__ = [
    "MASKED_ROWS",
    "BlockMask",
    "Cancelled",
    "CheckReport",
    "StepCheck",
    "Example",
    "Explanation",
    "KVCache",
    "Options",
    "Progress",
    "Step",
    "Trace",
    "as_sdpa",
    "attention_rows",
    "causal_mask",
    "check",
    "check_backward",
    "check_variants",
    "check_variants_backward",
    "compare_traces",
    "create_block_mask",
    "decode_attention",
    "decode_example",
    "explain",
    "flex_attention",
    "flex_attention_backward",
    "gradient_tolerance",
    "make_grad_output",
    "mask_rule",
    "matmul",
    "merge_partials",
    "multi_head_attention",
    "multi_head_attention_backward",
    "MultiHeadGradients",
    "one_hot",
    "paged_decode_attention",
    "plan_multi_head",
    "reporting",
    "rotary",
    "rotary_backward",
    "sample_rows",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "sdpa_variant",
    "shapes_for_heads",
    "shape_of",
    "softmax",
    "split_kv_attention",
    "step_check",
    "tolerance",
    "trace_attention",
    "trace_example",
    "transpose",
]
