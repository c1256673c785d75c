"""What the Model tab's block view shows of one layer (no Qt): a box per step of the block.

Each box is one named array of scratch.models.block as a small heatmap:
its title, its shape in the model's own sizes, what it computes, the matrix to draw and its
colour levels, and where a click on it goes (the attention box: the head grid; the heads'
input x: the pipeline). Signed matrices get symmetric levels at the 99th percentile of |value|
(a few huge features, common in LLMs' residual streams, would otherwise wash out the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gui.present import pooled

TITLES = {
    "embeddings": "Token embeddings",
    "positions": "Position embeddings",
    "input": "Into layer {layer}",
    "norm": "{norm}",
    "attention": "Attention",
    "attention output": "Attention output",
    "residual": "+ Residual",
    "norm 2": "{norm}",
    "mlp": "{mlp}",
    "mlp output": "MLP output",
    "residual 2": "+ Residual out",
    "output": "{output}",
}
# each layout's words (scratch.models.block.Block.layout, its Family record's)
NORMS = {"bert": "LayerNorm", "gpt2": "LayerNorm", "llama": "RMSNorm"}
MLPS = {"bert": "MLP (GELU)", "gpt2": "MLP (GELU)", "llama": "MLP (SwiGLU)"}
OUTPUTS = {"bert": "Output vectors", "gpt2": "Output vectors", "llama": "Next-token logits"}
CLICKS = {"attention": "heads", "norm": "pipeline"}  # where a click on a box goes
PERCENTILE = 99.0  # signed boxes: levels at this percentile of |value|


@dataclass(frozen=True)
class Box:
    """One step of the block as the view draws it."""

    name: str  # the stage's name in scratch.models.block
    title: str
    shape: str  # "5 x 576 (T x d_model)"
    words: str  # what the step computes
    image: np.ndarray  # (rows, cols) float32, C-contiguous: what is drawn
    levels: tuple[float, float]
    kind: str  # "weights" (sequential 0..1), "signed" (diverging) or "logits" (sequential)
    click: str = ""  # "heads", "pipeline" or "" (not clickable)


def boxes(block: object, head: int) -> list[Box]:
    """The boxes of a scratch.models.block.Block in order; the attention box shows `head`."""
    out = []
    for stage in block.stages:
        value = np.asarray(stage.value, dtype=np.float64)
        title = TITLES[stage.name].format(
            norm=NORMS[block.layout],  # by the Family record's layout: Qwen2's is Llama's
            mlp=MLPS[block.layout],
            output=OUTPUTS[block.layout],
            layer=block.layer,
        )
        if stage.name == "attention":
            H = value.shape[0]
            if not 0 <= head < H:
                raise ValueError(f"head: expected 0 to {H - 1}, found {head}")
            image, levels, kind = value[head], (0.0, 1.0), "weights"
            title = f"Attention: head {head}"
        elif stage.name == "output" and stage.columns:
            image, kind = value, "logits"
            levels = (float(value.min()), float(value.max()))
        else:
            image, kind = value, "signed"
            top = float(np.percentile(np.abs(value), PERCENTILE)) or 1.0
            levels = (-top, top)
        out.append(
            Box(
                stage.name,
                title,
                shape_text(stage.name, value.shape),
                stage.words,
                np.ascontiguousarray(image, dtype=np.float32),
                levels,
                kind,
                CLICKS.get(stage.name, ""),
            )
        )
    return out


def shape_text(name: str, shape: tuple[int, ...]) -> str:
    """The shape in numbers and in the model's words: '9 x 5 x 5 (heads x T x T)'."""
    numbers = " x ".join(str(n) for n in shape)
    if name == "attention":
        return f"{numbers} (heads x T x T)"
    if name == "mlp":
        return f"{numbers} (T x d_inner)"
    if name == "output" and len(shape) == 2 and shape[1] < 64:
        return f"{numbers} (T x top tokens)"
    return f"{numbers} (T x d_model)"


def max_pool(image: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The image shrunk to at most rows x cols by the largest value of each block: a weight of
    0.9 in a 512 x 512 head stays bright in a 50-pixel box (sampling would drop most cells)."""
    fy, fx = -(-image.shape[0] // rows), -(-image.shape[1] // cols)  # block sizes (ceil)
    return pooled.maximum(image, (fy, fx))
