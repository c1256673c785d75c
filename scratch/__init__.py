"""scratch: Transformer attention from scratch, exact, in plain Python.

The ground truth: scaled dot-product attention, masks, multi-head and grouped-query attention on
nested lists, every sum correctly rounded with math.fsum, with the argument names and semantics
of `torch.nn.functional.scaled_dot_product_attention`. Standard library only.
"""

from .attention import scaled_dot_product_attention
from .backward import scaled_dot_product_attention_backward
from .checker import CheckReport, check
from .compare import StepCheck, compare_traces
from .explain import Explanation, explain
from .linalg import matmul, transpose
from .masks import causal_mask
from .multihead import multi_head_attention
from .rows import attention_rows, sample_rows
from .softmax import softmax
from .tolerance import tolerance
from .trace import Step, Trace, trace_attention
from .validate import MASKED_ROWS, as_tensor


def shape_of(nested: object) -> tuple[int, ...]:
    """Shape of a regular nested list (or array); ValueError/TypeError if it is not one."""
    return as_tensor(nested, "nested", min_dims=1)[1]


__all__ = [
    "MASKED_ROWS",
    "CheckReport",
    "StepCheck",
    "Explanation",
    "Step",
    "Trace",
    "attention_rows",
    "causal_mask",
    "check",
    "compare_traces",
    "explain",
    "matmul",
    "multi_head_attention",
    "sample_rows",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "shape_of",
    "softmax",
    "tolerance",
    "trace_attention",
    "transpose",
]
