"""A model head's title (the status bar's 'opened' message, the note under the preset): the
model's name, layer and head, spaced and read back equal to the head that was opened."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from gui.state.head_note import head_title, model_head_note
from gui.state.model_session import head_session


def _run(name: str, rng: np.random.Generator) -> SimpleNamespace:
    """A stand-in encoder run: 3 tokens, d_model 4, a head of width 2, biases."""
    p = {f"{w}_{n}": rng.normal(size=(4, 2) if w == "w" else 2) for w in "wb" for n in "qkv"}
    model = SimpleNamespace(
        family="bert", decoder=False, name=name, causal=False,
        head_projections=lambda layer, head: p, scale=lambda layer: None,
    )  # fmt: skip
    return SimpleNamespace(model=model, inputs=[rng.normal(size=(3, 4))] * 12, tokens=["a"] * 3)


@pytest.mark.parametrize("seed", range(4))
def test_the_title_names_the_opened_model_layer_and_head(seed):
    rng = np.random.default_rng(seed)
    layer, head = int(rng.integers(0, 12)), int(rng.integers(0, 12))
    s = head_session(_run("all-MiniLM-L6-v2", rng), layer, head)
    title = head_title(s.preset)
    found = re.fullmatch(r"(\S+), layer (\d+), head (\d+)", title)
    assert found, title
    assert found.groups() == ("all-MiniLM-L6-v2", str(layer), str(head))
    assert model_head_note(s).startswith(f"<b>{title}</b>")
