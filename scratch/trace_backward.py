"""The backward steps of a worked example: a forward trace plus dO -> the trace with gradients.

Every number comes from `scratch.multihead_backward.run_backward` (the ground truth's backward,
fsum everywhere); this module only names and orders them as the registry's steps 9-16 say.
"""

from __future__ import annotations

import copy
import dataclasses
import random

from .multihead import Projected
from .multihead_backward import run_backward
from .steps import call_of, lay_out


def replay_of(rng: object) -> object:
    """A copy of `rng` (None: Python's global generator) in its present state: taken before the
    forward draws its dropout mask, it draws the same mask again for the backward."""
    if rng is None:
        replay = random.Random()
        replay.setstate(random.getstate())
        return replay
    return copy.deepcopy(rng)


def add_backward(trace: object, run: Projected, grad_output: object, replay: object = None):
    """`trace` (the forward of `run`) followed by its backward steps for dO = `grad_output`;
    with dropout, `replay` draws the forward's mask again (see `replay_of`)."""
    back = run_backward(run, grad_output, replay)
    heads = back.heads  # one Gradients per head, in head order
    values = {
        "grad_output": back.grad_output,  # (L, d_out)
        "grad_head_outputs": [g.grad_output for g in heads],  # (H, L, d_v)
        "grad_value": back.grad_v,  # (S, Hkv * d_v), each kv head summed over its group
        "grad_weights": [g.grad_dropped for g in heads],  # (H, L, S), d loss / d weights
        "row_dot": [g.row_dot for g in heads],  # (H, L)
        "grad_scores": [g.grad_scores for g in heads],  # (H, L, S)
        "grad_query": back.grad_q,  # (L, H * d_head)
        "grad_key": back.grad_k,  # (S, Hkv * d_head)
        "grad_x": back.grad_inputs["query"],
        "grad_key_input": back.grad_inputs["key"],
        "grad_value_input": back.grad_inputs["value"],
        **back.grad_params,  # grad_w_q ... grad_b_o, those given
    }
    call = dataclasses.replace(
        call_of(trace), backward=True, tokens=len(trace.tokens), key_tokens=len(trace.key_tokens)
    )
    return dataclasses.replace(trace, steps=trace.steps + lay_out(call, values, backward=True))
