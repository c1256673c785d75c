"""transformers' Llama in float64 on the dequantized GGUF weights: the decoder's reference.

transformers 5.x keeps three steps of modeling_llama.py in float32 whatever the weights' dtype
(RMSNorm's upcast, the rotary angles, the eager softmax). A float64 comparison at 1e-9 needs
them in float64, so the module's own source is compiled again with those three casts widened
(each replacement must match, so a changed transformers fails here, not silently). The weights
are dequantized by the gguf package (the library transformers' GGUF loader calls), named by
gguf's own tensor-name map and their q, k rows un-permuted by transformers' LlamaTensorProcessor;
the config comes from transformers' GGUF reader. So a mistake in scratch/models/gguf_file.py
cannot leak into the reference. (transformers' load_gguf_checkpoint would do the same steps but
rebuilds gguf's name map for every submodule: about 6 s of CPU for nothing.)
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import torch

# (text in modeling_llama.py, float64 text, times it must occur)
WIDEN = [
    ("hidden_states.to(torch.float32)", "hidden_states.to(torch.float64)", 1),  # RMSNorm
    ("dtype=torch.float)", "dtype=torch.float64)", 2),  # inv_freq and the angles
    ("position_ids[..., None].float()", "position_ids[..., None].double()", 1),
    ("softmax(attn_weights, dim=-1, dtype=torch.float32)", "softmax(attn_weights, dim=-1)", 1),
]


def llama64_module(family: str = "llama") -> types.ModuleType:
    """transformers' modeling_llama (or modeling_qwen2) compiled again with its float32 steps
    in float64 (Qwen2's modeling file has the same four casts)."""
    name = f"transformers.models.{family}.modeling_{family}"
    original = importlib.import_module(name)
    source = Path(original.__file__).read_text(encoding="utf-8")
    for old, new, count in WIDEN:
        assert source.count(old) == count, f"modeling_{family}.py changed: {old!r}"
        source = source.replace(old, new)
    module = types.ModuleType(name + "_float64")
    module.__file__ = original.__file__
    module.__package__ = original.__package__
    sys.modules[module.__name__] = module
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


CLASSES = {  # GGUF architecture -> transformers' model and rotary classes
    "llama": ("LlamaForCausalLM", "LlamaRotaryEmbedding"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2RotaryEmbedding"),
}


def reference(path: Path) -> torch.nn.Module:
    """LlamaForCausalLM (or Qwen2ForCausalLM, as the file's architecture says) in float64,
    eager attention, weights dequantized by the gguf package; q, k rows put back by
    transformers' own LlamaTensorProcessor for Llama (llama.cpp permutes no Qwen2 rows)."""
    import gguf
    import transformers
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    family = config.model_type
    model_class, rotary_class = CLASSES[family]
    module = llama64_module(family)
    tensors = gguf.GGUFReader(path).tensors
    config.tie_word_embeddings = all(t.name != "output.weight" for t in tensors)
    config._attn_implementation = "eager"
    with torch.device("meta"):  # no random initialisation of 135 M numbers: weights come next
        model = getattr(module, model_class)(config)
    model.requires_grad_(False)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[family.upper()], config.num_hidden_layers)
    to_hf = {}  # GGUF tensor name -> transformers' parameter name
    for hf_name in model.state_dict():
        base, suffix = hf_name.rsplit(".", 1)
        if (gguf_name := names.get_name(base)) is not None:
            to_hf[f"{gguf_name}.{suffix}"] = hf_name
    heads = {k: getattr(config, k) for k in ("num_attention_heads", "num_key_value_heads")}
    unpermute = LlamaTensorProcessor(config=heads)  # transformers' own q, k row order
    state = {}
    for tensor in tensors:
        weights = gguf.dequantize(tensor.data, tensor.tensor_type)  # float32
        if family == "llama":
            weights = unpermute.process(weights=weights, name=tensor.name).weights
        state[to_hf[tensor.name]] = torch.from_numpy(weights.astype("float64"))
    missing = model.load_state_dict(state, strict=False, assign=True).missing_keys
    if config.tie_word_embeddings:
        assert missing == ["lm_head.weight"], missing  # tied: the token table
        model.lm_head.weight = model.model.embed_tokens.weight
    else:
        assert missing == [], missing  # an output head of its own
    model.model.rotary_emb = getattr(module, rotary_class)(config)  # its buffers, off meta
    return model.eval()


def tokenizer(path: Path) -> object:
    """transformers' tokenizer built from the same GGUF file."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
