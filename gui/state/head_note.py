"""The note under the preset for a real model's head opened in the pipeline (no Qt)."""

from __future__ import annotations

import html

from gui.state import session as sm


def head_title(preset: str) -> str:
    """'model:all-MiniLM-L6-v2:layer 0:head 2' -> 'all-MiniLM-L6-v2, layer 0, head 2'."""
    return ", ".join(part.strip() for part in preset.removeprefix("model:").split(":"))


def model_head_note(s: sm.Session) -> str:
    """Rich text saying where a model head's numbers come from; '' for any other session."""
    if not s.preset.startswith("model:"):
        return ""
    title = html.escape(head_title(s.preset))
    if s.mode != "project":  # a decoder's head: rotated q, k and its v, no weights shown
        return f"<b>{title}</b><br>q, k and v are the model's own, after its projections."
    rope = getattr(s.variant, "rope", "none")
    biased = all(row[-1] == 1.0 for row in s.query)  # model_session.with_biases' ones column
    size = f"d_model {len(s.query[0]) - 1} + 1" if biased else f"d_model {len(s.query[0])}"
    biases = (
        "X's last column is all ones and the last row of W_q, W_k, W_v holds the biases b_q, "
        "b_k, b_v, so X @ W_q is the model's x @ W_q + b_q"
        if biased
        else "no biases"
    )
    if rope != "none":  # a decoder's head: RoPE after W_q and W_k (Qwen2: biases; Llama: none)
        return (
            f"<b>{title}</b><br>{size}: X is the layer's RMSNorm'd input, W_q the head's "
            "columns, W_k and W_v those of the key/value head it shares "
            f"({biases}); RoPE ({rope} pairing) then turns q and k "
            "(steps q_rotated, k_rotated)."
        )
    return f"<b>{title}</b><br>{size}: {biases}."
