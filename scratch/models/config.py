"""config.json read into a typed Config: every key that changes the forward is used or refused.

KEYS lists each key of the BERT and GPT-2 configs (transformers' BertConfig, GPT2Config) and
what this package does with it: "implemented" (read and used), "refused" (a value this forward
does not compute is refused at load, naming the key) or "irrelevant" (it cannot change the
attentions of a text: dropout, initialisation, task heads, caching). A missing key takes
transformers' default; keys in no list are ignored, as transformers ignores them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from scratch.models.family import family_of
from scratch.models.files import ModelError
from scratch.models.layers import ACTIVATIONS

# what each key of each family does here (the README's table lists the same, tested)
IRRELEVANT = {
    "architectures": "names the task class; the base model is run",
    "attention_probs_dropout_prob": "dropout is off at inference",
    "attn_pdrop": "dropout is off at inference",
    "embd_pdrop": "dropout is off at inference",
    "resid_pdrop": "dropout is off at inference",
    "hidden_dropout_prob": "dropout is off at inference",
    "classifier_dropout": "task head only",
    "summary_type": "GPT2DoubleHeadsModel's head only",
    "summary_use_proj": "GPT2DoubleHeadsModel's head only",
    "summary_activation": "GPT2DoubleHeadsModel's head only",
    "summary_proj_to_labels": "GPT2DoubleHeadsModel's head only",
    "summary_first_dropout": "GPT2DoubleHeadsModel's head only",
    "initializer_range": "random initialisation only",
    "pad_token_id": "marks a row for training; the forward reads every row alike",
    "bos_token_id": "generation only",
    "eos_token_id": "generation only",
    "use_cache": "generation only (keys and values kept between steps)",
    "tie_word_embeddings": "the output head only",
    "id2label": "task head only",
    "label2id": "task head only",
    "problem_type": "task head only",
    "output_attentions": "what transformers returns, not what it computes",
    "output_hidden_states": "what transformers returns, not what it computes",
    "return_dict": "what transformers returns, not what it computes",
    "dtype": "the weights' dtype is read from model.safetensors; the forward is float64",
    "torch_dtype": "the weights' dtype is read from model.safetensors; the forward is float64",
    "chunk_size_feed_forward": "the feed-forward in row chunks: the same rows, the same sums",
    "is_encoder_decoder": "an encoder-decoder wrapper's flag; the base model ignores it",
    "reorder_and_upcast_attn": "float32 scores for float16 training: the same math (tested)",
    "add_cross_attention": "runs on an encoder's states; a text has none (BERT: needs is_decoder)",
    "n_ctx": "old GPT-2 files' copy of n_positions; transformers no longer reads it",
    "transformers_version": "bookkeeping",
    "_name_or_path": "bookkeeping",
    "gradient_checkpointing": "training only",
    "attn_implementation": "eager, sdpa or flash: the same softmax(q k^T * scale) v",
    "_attn_implementation": "eager, sdpa or flash: the same softmax(q k^T * scale) v",
}

# per family and field: its config.json key names (GPT-2 also accepts transformers' aliases, its
# attribute_map) and transformers' default (GPT2Config(), BertConfig(); None: n_inner = 4 * n_embd)
FIELDS = {
    "gpt2": {
        "vocab_size": (("vocab_size",), 50257),
        "d_model": (("n_embd", "hidden_size"), 768),
        "layers": (("n_layer", "num_hidden_layers"), 12),
        "heads": (("n_head", "num_attention_heads"), 12),
        "max_positions": (("n_positions", "max_position_embeddings"), 1024),
        "d_inner": (("n_inner",), None),
        "eps": (("layer_norm_epsilon",), 1e-5),
        "activation": (("activation_function",), "gelu_new"),
        "scale_weights": (("scale_attn_weights",), True),
        "inverse_layer_scale": (("scale_attn_by_inverse_layer_idx",), False),
    },
    "bert": {
        "vocab_size": (("vocab_size",), 30522),
        "d_model": (("hidden_size",), 768),
        "layers": (("num_hidden_layers",), 12),
        "heads": (("num_attention_heads",), 12),
        "max_positions": (("max_position_embeddings",), 512),
        "d_inner": (("intermediate_size",), 3072),
        "eps": (("layer_norm_eps",), 1e-12),
        "activation": (("hidden_act",), "gelu"),
        "type_vocab_size": (("type_vocab_size",), 2),
        "causal": (("is_decoder",), False),
    },
}
NAMES = {family: {f: names for f, (names, _) in table.items()} for family, table in FIELDS.items()}
DEFAULTS = {
    family: {f: value for f, (_, value) in table.items()} for family, table in FIELDS.items()
}

# GPT-2 only: BERT reads this key (is_decoder, its causal mask)
IRRELEVANT_GPT2 = {"is_decoder": "GPT-2's heads are causal whatever it says"}

# keys whose other values this forward does not compute: key -> (families, value allowed, why)
REFUSED = {
    "position_embedding_type": (
        ("bert",),
        "absolute",
        "relative position scores are not computed here",
    ),
    "pruned_heads": (
        ("bert", "gpt2"),
        {},
        "pruned heads leave layers with fewer heads than num_attention_heads",
    ),
}


def keys(family: str) -> dict[str, str]:
    """Every key of a family and what happens to it: implemented, refused or irrelevant."""
    table = {name: "implemented" for names in NAMES[family].values() for name in names}
    table["model_type"] = "implemented"
    table.update({name: "irrelevant" for name in IRRELEVANT})
    table.update({name: "irrelevant" for name in IRRELEVANT_GPT2 if family == "gpt2"})
    table.update({name: "refused" for name, (where, *_) in REFUSED.items() if family in where})
    return table


@dataclass(frozen=True)
class Config:
    """The numbers of config.json the forward uses, checked (types, ranges, refused values)."""

    family: str  # "bert" (bidirectional unless is_decoder), "gpt2" or "llama" (causal)
    vocab_size: int
    d_model: int
    layers: int
    heads: int
    max_positions: int
    d_inner: int  # the feed-forward's hidden width
    eps: float  # LayerNorm's epsilon
    activation: str  # a name in layers.ACTIVATIONS
    causal: bool = True
    type_vocab_size: int = 0  # BERT's token-type rows (row 0 is added); GPT-2 has none
    scale_weights: bool = True  # GPT-2 scale_attn_weights: scores / sqrt(d_head)
    inverse_layer_scale: bool = False  # GPT-2 scale_attn_by_inverse_layer_idx: also / (layer + 1)
    kv_heads: int = 0  # Llama: key/value heads shared by heads // kv_heads query heads each
    rope_base: float = 0.0  # Llama: RoPE's base (every feature of a head turns, "half" pairing)
    tied: bool = True  # a decoder's output head is the token table (else output.weight)

    @property
    def decoder(self) -> bool:
        """Whether this is a decoder (its Family record says: rotary positions, an output head,
        next tokens and generation with a key/value cache). BERT's config key is_decoder is not
        this: it only makes BERT's heads causal (`causal`)."""
        return family_of(self.family).decoder

    @property
    def d_head(self) -> int:
        """Width of one head."""
        return self.d_model // self.heads

    def scale(self, layer: int) -> float | None:
        """Layer `layer`'s score scale; None for the usual 1/sqrt(d_head) (PyTorch's default)."""
        if self.scale_weights and not self.inverse_layer_scale:
            return None
        scale = 1.0 / math.sqrt(self.d_head) if self.scale_weights else 1.0
        return scale / (layer + 1) if self.inverse_layer_scale else scale

    def value(self, key: str) -> object:
        """The value read for a config.json key (any of its names)."""
        field = next(f for f, names in NAMES[self.family].items() if key in names)
        return getattr(self, field)

    def name(self, field: str) -> str:
        """The config.json key a field is read from (its first name)."""
        return NAMES[self.family][field][0]


def parse(raw: dict, path: Path) -> Config:
    """A checked Config from config.json's dict; a ModelError names the file and the key."""
    family = raw.get("model_type")
    if not isinstance(family, str) or family not in NAMES:
        raise ModelError(
            f"{path}: model_type {family!r} is not supported; "
            f"supported: {', '.join(NAMES)} (BERT and GPT-2 families) and llama"
        )
    for key, (where, allowed, why) in REFUSED.items():
        if family in where and key in raw and raw[key] != allowed:
            raise ModelError(f"{path}: {key} {raw[key]!r} is refused ({why}); expected {allowed!r}")
    values = {name: _read(raw, path, family, name) for name in NAMES[family]}
    if values["d_inner"] is None:
        values["d_inner"] = 4 * values["d_model"]
    config = Config(family=family, **values)
    if config.d_model % config.heads:
        raise ModelError(
            f"{path}: {config.name('heads')} {config.heads} does not divide "
            f"{config.name('d_model')} {config.d_model} (each head gets d_model / heads columns)"
        )
    if raw.get("add_cross_attention") is True and family == "bert" and not config.causal:
        raise ModelError(f"{path}: add_cross_attention needs is_decoder true (as in transformers)")
    return config


def _read(raw: dict, path: Path, family: str, field: str) -> object:
    """One field's value: present under one of its names (or the default), of the right type."""
    names = [name for name in NAMES[family][field] if name in raw]
    a, b = (raw[name] for name in names) if len(names) > 1 else (None, None)
    if len(names) > 1 and (type(a) is not type(b) or a != b):  # 1 == True == 1.0 in Python
        raise ModelError(
            f"{path}: {names[0]} {raw[names[0]]!r} and {names[1]} {raw[names[1]]!r} "
            f"name one number twice and disagree"
        )
    if not names:
        return DEFAULTS[family][field]
    key, value = names[0], raw[names[0]]
    default = DEFAULTS[family][field]
    if field == "activation":
        if not isinstance(value, str) or value not in ACTIVATIONS:
            raise ModelError(
                f"{path}: {key} {value!r} is not supported; supported: {', '.join(ACTIVATIONS)}"
            )
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ModelError(f"{path}: {key} expected true or false, found {value!r}")
        return value
    if field == "eps":
        return real(value, f"{path}: {key}", zero=True)
    if value is None and default is None:  # GPT-2's n_inner: null means 4 * n_embd
        return None
    return whole(value, f"{path}: {key}")


def whole(value: object, where: str) -> int:
    """A whole number >= 1 (never a bool), else a ModelError naming `where` ("path: key")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{where} expected a whole number >= 1, found {value!r}")
    return value


def real(value: object, where: str, zero: bool = False) -> float:
    """A finite number > 0 (>= 0 with `zero`) as a float, else a ModelError naming `where`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "a finite number >= 0" if zero else "a number > 0"
        raise ModelError(f"{where} expected {least}, found {value!r}")
    return float(value)


def check_heads(config: Config, path: Path, heads: str, kv_heads: str, d_model: str) -> None:
    """A decoder's heads are a multiple of its kv_heads and divide d_model, else a ModelError
    naming the file and the three keys (as the file spells them)."""
    if config.heads % config.kv_heads or config.d_model % config.heads:
        raise ModelError(
            f"{path}: {heads} {config.heads} must be a multiple of {kv_heads} {config.kv_heads} "
            f"and divide {d_model} {config.d_model}"
        )
