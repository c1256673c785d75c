"""config.json, model.safetensors and tokenizer.json agree, checked once at load.

A config that asks for more layers, positions or width than the weights hold, or a tokenizer
whose ids run past the vocabulary, is refused here with the file and key named, not left to
fail (or to run on the wrong numbers) when a text is run or a head traced.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from scratch.models.config import Config
from scratch.models.files import ModelError


def check_weights(config: Config, need: dict, weights: dict, path: Path) -> None:
    """Every tensor in `need` (name -> (shape, keys)) is in `weights`, floating, of that shape."""
    for name, (shape, keys) in need.items():
        if name not in weights:
            raise ModelError(f"{path}: {_missing(config, name, weights)}")
        found = weights[name]
        if found.dtype.kind != "f":
            raise ModelError(f"{path}: {name} holds {found.dtype}; expected floating-point weights")
        if found.shape != shape:
            raise ModelError(
                f"{path}: {name} has shape {found.shape}, but config.json's {keys} "
                f"({_values(config, keys)}) ask for {shape}"
            )


def _missing(config: Config, name: str, weights: dict) -> str:
    """Why a tensor is missing: more layers asked for than the file holds, or another model."""
    layer = re.search(r"(?:^h|layer)\.(\d+)\.", name)
    if layer is None:
        return (
            f"{name} is missing: not the {config.family} checkpoint config.json's model_type says"
        )
    prefix = name[: layer.start(1)]
    held = {int(m.group(1)) for w in weights if (m := re.match(re.escape(prefix) + r"(\d+)\.", w))}
    return (
        f"{name} is missing: config.json's {config.name('layers')} is {config.layers}, "
        f"the file holds {len(held)} layers"
    )


def _values(config: Config, keys: str) -> str:
    """'vocab_size 10, n_embd 12': the values of the named keys, as this config read them."""
    return ", ".join(f"{key} {config.value(key)}" for key in keys.split(", "))


def check_tokenizer(config: Config, tokenizer: object, path: Path) -> None:
    """Every id the tokenizer can produce has a row in the token table."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    if not vocab:
        raise ModelError(f"{path}: the tokenizer has an empty vocabulary")
    token, top = max(vocab.items(), key=lambda item: item[1])
    if top >= config.vocab_size:
        raise ModelError(
            f"{path}: token {token!r} has id {top}, past config.json's vocab_size "
            f"{config.vocab_size} (the token table's rows)"
        )


def check_tensors(
    config: Config, need: dict, found: dict, path: Path, problem: Callable[[object, tuple], str]
) -> None:
    """A decoder file holds exactly the tensors `need` lists (name -> (shape, ...)), each of
    them right: `problem(tensor, need[name])` says what is wrong with one ('' if nothing)."""
    extra = sorted(set(found) - set(need))
    if extra:
        raise ModelError(
            f"{path}: tensor {extra[0]} is not computed here (not a plain {config.family})"
        )
    for name, want in need.items():
        if name not in found:
            raise ModelError(f"{path}: tensor {name} is missing ({config.layers} layers asked for)")
        why = problem(found[name], want)
        if why:
            raise ModelError(f"{path}: tensor {name} {why}")
