"""A Llama-family directory (config.json, model.safetensors, tokenizer.json) as a decoder.

The same forward as a GGUF file's (llama.py): config.json is read into the same Config, every
key of transformers' LlamaConfig either read, refused at load naming the key, or unable to
change a text's numbers (KEYS; the README lists the same, tested); the tensors, in Hugging
Face's names and row order (the "half" rotary pairing), are widened to float64 once into the
GGUF reader's arrays (q, k, v and gate, up each in one array).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratch.models.config import IRRELEVANT as ENCODERS_IRRELEVANT
from scratch.models.config import Config, check_heads, real, whole
from scratch.models.files import ModelError, read_tokenizer, read_weights
from scratch.models.shapes import check_tensors, check_tokenizer

# key -> (Config field, LlamaConfig's default); num_key_value_heads' default is the head count
READ = {
    "vocab_size": ("vocab_size", 32000),
    "hidden_size": ("d_model", 4096),
    "intermediate_size": ("d_inner", 11008),
    "num_hidden_layers": ("layers", 32),
    "num_attention_heads": ("heads", 32),
    "num_key_value_heads": ("kv_heads", None),
    "max_position_embeddings": ("max_positions", 2048),
    "rms_norm_eps": ("eps", 1e-6),
}
# key -> (value computed here, LlamaConfig's default, why another value is refused)
REFUSED = {
    "hidden_act": ("silu", "silu", "SwiGLU with SiLU is the feed-forward written here"),
    "attention_bias": (False, False, "q, k, v and output biases are not computed here"),
    "mlp_bias": (False, False, "feed-forward biases are not computed here"),
    "tie_word_embeddings": (True, False, "the output head is the token table (tied)"),
    "rope_scaling": (None, None, "RoPE scaling changes the angles"),
}
SHARED = (  # keys whose reason is the encoders' (config.IRRELEVANT)
    "bos_token_id", "eos_token_id", "chunk_size_feed_forward", "dtype", "torch_dtype", "id2label",
    "label2id", "problem_type", "initializer_range", "output_attentions", "output_hidden_states",
    "return_dict", "use_cache", "transformers_version", "_name_or_path",
)  # fmt: skip
IRRELEVANT = {key: ENCODERS_IRRELEVANT[key] for key in SHARED} | {
    "architectures": "names the task class; the causal LM is run",
    "attention_dropout": "dropout is off at inference",
    "pad_token_id": "padding is off (one row per real token)",
    "is_encoder_decoder": "an encoder-decoder wrapper's flag; the decoder ignores it",
    "pretraining_tp": "tensor-parallel slices of the same products",
}
PARTS = {  # Hugging Face's name within a layer -> the GGUF name
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def keys() -> dict[str, str]:
    """Every config.json key of a Llama directory and what happens to it."""
    table = {key: "implemented" for key in (*READ, "model_type", "rope_parameters", "rope_theta")}
    table["head_dim"] = "refused"
    table |= {key: "refused" for key in REFUSED}
    table |= {key: "irrelevant" for key in IRRELEVANT}
    return table


def parse(raw: dict, path: Path) -> Config:
    """The Config of a Llama config.json; a ModelError names the file and the key."""
    for key, (allowed, default, why) in REFUSED.items():
        value = raw.get(key, default)
        if value != allowed or type(value) is not type(allowed):
            raise ModelError(f"{path}: {key} {value!r} is refused ({why}); expected {allowed!r}")
    values: dict = {}
    for key, (field, default) in READ.items():
        value = raw.get(key, default if default is not None else values["heads"])
        values[field] = (real if field == "eps" else whole)(value, f"{path}: {key}")
    config = Config(
        family="llama", activation="silu", causal=True, rope_base=_rope_base(raw, path), **values
    )
    check_heads(config, path, "num_attention_heads", "num_key_value_heads", "hidden_size")
    if raw.get("head_dim") not in (None, config.d_head):
        raise ModelError(
            f"{path}: head_dim {raw['head_dim']!r} is refused (heads of another width than "
            f"hidden_size / num_attention_heads = {config.d_head} are not computed here)"
        )
    return config


def _rope_base(raw: dict, path: Path) -> float:
    """RoPE's base: rope_parameters' rope_theta (transformers 5), else rope_theta, else 10000."""
    rope = raw.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
            raise ModelError(
                f"{path}: rope_parameters {rope!r} is refused (only the plain rotation, "
                f"rope_type 'default', is computed here)"
            )
        extra = sorted(set(rope) - {"rope_type", "rope_theta"})
        if extra:
            raise ModelError(f"{path}: rope_parameters key {extra[0]} is refused (RoPE changed)")
    base = (rope or {}).get("rope_theta", raw.get("rope_theta", 10000.0))
    return real(base, f"{path}: rope_theta")


def read_dir(folder: Path, raw: dict) -> tuple[Config, dict[str, np.ndarray], object]:
    """(Config, float64 weights under the GGUF names, tokenizer) of a Llama directory."""
    from scratch.models.gguf_file import allocate, tensors

    config = parse(raw, folder / "config.json")
    path = folder / "model.safetensors"
    found = read_weights(path)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    for n in range(config.layers):
        for hf, ours in PARTS.items():
            names[f"model.layers.{n}.{hf}.weight"] = f"blk.{n}.{ours}.weight"
    if "lm_head.weight" in found:  # a tied head saved twice must be the token table
        if not np.array_equal(found.pop("lm_head.weight"), found.get("model.embed_tokens.weight")):
            raise ModelError(f"{path}: lm_head.weight differs from the token table (untied)")
    table = tensors(config)
    need = {hf: table[ours] for hf, ours in names.items()}  # (shape, types) by HF name

    def problem(w: np.ndarray, want: tuple) -> str:
        if w.dtype.kind == "f" and w.shape == want[0]:
            return ""
        return f"is {w.dtype} {w.shape}; expected floating point {want[0]} (config.json's sizes)"

    check_tensors(config, need, found, path, problem)
    weights = allocate(config)
    for hf, ours in names.items():
        weights[ours][...] = found[hf]
    tokenizer = read_tokenizer(folder / "tokenizer.json")
    check_tokenizer(config, tokenizer, folder / "tokenizer.json")
    return config, weights, tokenizer
