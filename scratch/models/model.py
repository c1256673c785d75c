"""A real model's attention, recomputed: load a model once, run a text, trace any head."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratch.models.config import Config, parse
from scratch.models.decoding import Generation, generate
from scratch.models.family import FAMILIES, Family, family_of
from scratch.models.files import (
    FILES,
    ModelError,
    check_dir,
    default_dir,
    read_config,
    read_tokenizer,
    read_weights,
    verify_default_weights,
)
from scratch.models.gguf_file import read_gguf, smollm2_path, verify_smollm2
from scratch.models.llama_dir import read_dir
from scratch.models.run import Run
from scratch.models.shapes import check_tokenizer, check_weights
from scratch.ops import progress as progress_


def _from_config(name: str, doc: str) -> property:
    """A Model property that reads the same field of its Config."""
    return property(lambda self: getattr(self.config, name), doc=doc)


@dataclass(frozen=True)
class Model:
    """Weights (read once), tokenizer and shape of one model.

    Attributes:
        name: the model's name (a known model's, or its directory's or file's).
        path: the directory or file it was read from.
        config: its Config: the family, layers, heads, widths.
        weights: {tensor name: array}, float64.
        tokenizer: its tokenizers.Tokenizer.
    """

    name: str
    path: Path
    config: Config = field(repr=False)
    weights: dict = field(repr=False)
    tokenizer: object = field(repr=False)

    family = _from_config("family", 'The family\'s name: "bert", "gpt2", "llama", "qwen2".')
    decoder = _from_config(
        "decoder",
        "Whether the model is a decoder (Config.decoder: rotary positions, an output "
        "head, generation with a key/value cache).",
    )
    layers = _from_config("layers", "Number of attention layers.")
    heads = _from_config("heads", "Heads per layer.")
    d_model = _from_config("d_model", "Width of the hidden states.")
    max_positions = _from_config("max_positions", "The most tokens the model has positions for.")
    causal = _from_config(
        "causal",
        "Whether each token attends only to itself and earlier tokens (GPT-2, BERT decoders).",
    )

    @property
    def family_record(self) -> Family:
        """What the family computes (scratch.models.family.Family: decoder, GQA map, RoPE)."""
        return family_of(self.family)

    def scale(self, layer: int) -> float | None:
        """Layer `layer`'s score scale; None for the usual 1/sqrt(d_head).

        Args:
            layer: the layer, 0 to layers - 1.
        """
        return self.config.scale(layer)

    def tokenize(self, text: object) -> tuple[list[str], list[int]]:
        """The tokens and ids of `text`, special tokens included; refuses empty or too long text.

        Args:
            text: the sentence (a str with a word token, at most max_positions tokens).
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, found {type(text).__name__}")
        if not text.strip():
            raise ValueError("text: empty; type a sentence to run the model on")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: not a character
            raise ValueError(
                f"text: {text[exc.start]!r} at position {exc.start} is a lone surrogate, "
                f"not a character; expected valid Unicode text"
            ) from None
        encoding = self.tokenizer.encode(text)
        tokens, ids = list(encoding.tokens), list(encoding.ids)
        if len(ids) > self.max_positions:
            raise ValueError(
                f"text: {len(ids)} tokens, more than {self.name}'s {self.max_positions} "
                f"positions; shorten the text"
            )
        if not any(special == 0 for special in encoding.special_tokens_mask):
            raise ValueError(
                f"text: no word tokens (the tokenizer kept only {' '.join(tokens) or 'nothing'}; "
                f"zero-width or control characters are dropped); type a sentence"
            )
        return tokens, ids

    def run(self, text: str) -> Run:
        """Run the model on `text`: every layer's and head's attention weights, in float64.

        Args:
            text: the sentence (see tokenize).
        """
        tokens, ids = self.tokenize(text)
        out = self.family_record.forward(self.config, self.weights, ids)
        return Run(self, text, tokens, ids, *out)

    def generate(
        self, text: str, max_new_tokens: int, temperature: float = 0.0, seed: int | None = None
    ) -> Generation:
        """Continue `text` token by token with a key/value cache (decoders with an output head).

        Args:
            text: the prompt (see tokenize).
            max_new_tokens: how many tokens to add (>= 1; prompt + new within max_positions).
            temperature: 0 picks the likeliest token; above 0 samples from softmax(logits / t).
            seed: seeds the sampling (step n by (seed, n)); None: unseeded.
        """
        return generate(self, text, max_new_tokens, temperature, seed)

    def head_projections(self, layer: int, head: int) -> dict[str, np.ndarray]:
        """w_q, w_k, w_v (d_model, d_head) and b_q, b_k, b_v (d_head,) of one head.

        Args:
            layer: the layer, 0 to layers - 1.
            head: the head, 0 to heads - 1.
        """
        self.check_head(layer, head)
        if self.decoder:
            raise ValueError(
                f"{self.name}: rotary positions turn q and k after the projections, so a head is "
                f"not x @ W + b; trace it with run.trace(layer, head)"
            )
        full = self.family_record.module().projections(self.weights, layer)
        d = self.d_model // self.heads
        cols = slice(head * d, (head + 1) * d)  # head h is the column block h*d:(h+1)*d
        return {
            name: (m[:, cols] if name.startswith("w_") else m[cols]) for name, m in full.items()
        }

    def check_head(self, layer: object, head: object) -> None:
        """layer and head are ints in range (TypeError or ValueError naming the argument).

        Args:
            layer: the layer, 0 to layers - 1.
            head: the head, 0 to heads - 1.
        """
        for name, value, top in (("layer", layer, self.layers), ("head", head, self.heads)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, found {type(value).__name__}")
            if not 0 <= value < top:
                raise ValueError(f"{name}: expected 0 to {top - 1}, found {value}")


def load(path: object = None, progress: progress_.Progress | None = None) -> Model:
    """A model read once and verified: the default, "smollm2", a model directory or a .gguf file.

    A first load reports its stages to `progress` (scratch.ops.progress: hash check, read,
    dequantize, tokenizer) and raises scratch.ops.progress.Cancelled once it is cancelled,
    caching nothing; a load of an unchanged file already read reports nothing.

    Args:
        path: None (all-MiniLM-L6-v2, verified by SHA-256), "smollm2" (SmolLM2-135M-Instruct,
            verified), a local model directory (BERT, GPT-2 or Llama family: config.json,
            model.safetensors, tokenizer.json) or a local .gguf file (a decoder family: Llama,
            Qwen2).
        progress: a Progress told of each stage of a first load (it can cancel), or None.

    Returns:
        The Model (`.run(text)` runs a text through it).
    """
    with progress_.reporting(progress):
        return _find(path)


def _find(path: object) -> Model:
    """The cached or newly read model `path` names (load's work)."""
    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path: expected a directory name, found {type(path).__name__}")
    if isinstance(path, str) and not path.strip():
        raise ValueError(
            'path: empty; expected "default", "smollm2", a model directory or a .gguf file'
        )
    if path == "smollm2" or str(path).endswith(".gguf"):
        packaged = path == "smollm2"
        resolved = (smollm2_path() if packaged else Path(path).expanduser()).resolve()
        try:
            stat = resolved.stat()
        except OSError:
            raise ModelError(f"{resolved}: not found (expected a .gguf file)") from None
        load_file = _load_packaged if packaged else _load_gguf
        return load_file(str(resolved), packaged, (stat.st_size, stat.st_mtime_ns))
    default = path in (None, "default")
    resolved = (default_dir() if default else Path(path).expanduser()).resolve()
    if not default and not resolved.is_dir():
        found = "a file, not a directory" if resolved.exists() else "not found"
        raise ModelError(
            f"{resolved}: {found} (expected a local model directory or .gguf file; "
            'the packaged models are "default" and "smollm2")'
        )
    return _load(str(resolved), default, _stamp(resolved))


def _stamp(folder: Path) -> tuple:
    """Size and modification time of the model's files: an edited file is read again."""
    try:
        stats = [(folder / name).stat() for name in FILES]
    except OSError:
        return ()
    return tuple((s.st_size, s.st_mtime_ns) for s in stats)


@functools.lru_cache(maxsize=4)
def _load(path: str, verify: bool, stamp: tuple) -> Model:
    """Read a model directory once; later loads of the same unchanged directory reuse it."""
    folder = Path(path)
    check_dir(folder)
    raw = read_config(folder / "config.json")
    model_type = raw.get("model_type")
    known = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if known is not None and known.decoder:  # the GGUF reader's arrays and forward
        return Model(folder.name, folder, *read_dir(folder, raw))
    config = parse(raw, folder / "config.json")
    if verify:
        verify_default_weights(folder / "model.safetensors")
    # float64 once here, not on every run; the token tables stay float32 (rows are gathered)
    tables = ("embeddings.word_embeddings.weight", "wte.weight")
    weights = {
        name: w if name in tables or w.dtype.kind != "f" else w.astype(np.float64)
        for name, w in read_weights(folder / "model.safetensors").items()
    }
    check_weights(
        config,
        family_of(config.family).module().tensors(config),
        weights,
        folder / "model.safetensors",
    )
    tokenizer = read_tokenizer(folder / "tokenizer.json")
    check_tokenizer(config, tokenizer, folder / "tokenizer.json")
    name = "all-MiniLM-L6-v2" if verify else folder.name
    return Model(name, folder, config, weights, tokenizer)


def _read_gguf(path: str, packaged: bool, stamp: tuple = ()) -> Model:
    """Read a GGUF file (SHA-256 checked if packaged); `stamp` (size, mtime) keys the caches."""
    file = Path(path)
    if packaged:
        verify_smollm2(file)
    config, weights, tokenizer = read_gguf(file)
    name = "SmolLM2-135M-Instruct" if packaged else file.stem
    return Model(name, file, config, weights, tokenizer)


# the packaged SmolLM2 is cached apart, so opening other GGUF files never reloads it; a local
# GGUF file is read once while unchanged (the two most recent are kept)
_load_packaged = functools.lru_cache(maxsize=1)(_read_gguf)
_load_gguf = functools.lru_cache(maxsize=2)(_read_gguf)
