"""scratch.models' front doors name a bad seed and a model name that is not packaged."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scratch import models
from scratch.models.decoding import generate


@pytest.mark.parametrize("seed", ["a", 1.5, True])
def test_a_seed_that_is_not_an_int_is_named(seed):
    decoder = SimpleNamespace(decoder=True, name="a decoder")  # refused before it is used
    with pytest.raises(TypeError, match="^seed: expected None or an int, found"):
        generate(decoder, "Hi", 2, 1.0, seed)


def test_an_unknown_model_name_lists_the_packaged_ones(tmp_path):
    for path in ("smollm3", tmp_path / "nowhere"):
        with pytest.raises(models.ModelError, match='packaged models are "default" and "smollm2"'):
            models.load(path)
