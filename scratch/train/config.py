"""What a training run is: the model's shape (ModelConfig) and the run's settings (TrainConfig).

One record each, validated once here, so that a new option touches one type and not every
signature. The defaults are the attention-only model of Elhage et al. 2021 that the induction
papers study: 2 layers, 4 heads, d_model 64, no MLP, no layer norm, learned positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scratch.ops.validate import check_choice, check_positive_int

BACKENDS = ("numpy", "scratch")  # the attention forward and backward: fast, or the ground truth
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class ModelConfig:
    """A tiny decoder: token + position embeddings, attention layers, an unembedding."""

    vocab: int = 32
    context: int = 48  # positions with a learned embedding (the longest input)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads; fewer: grouped-query attention (GQA)
    mlp: bool = False  # a ReLU MLP (4 * d_model wide) after each attention layer
    norm: bool = False  # layer norm before each sublayer and before the unembedding
    causal: bool = True  # a query sees only keys at or before it (a language model)

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "d_model", "n_layers", "n_heads"):
            check_positive_int(getattr(self, name), name)
        kv = self.kv_heads
        check_positive_int(kv, "n_kv_heads")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model: expected a multiple of n_heads={self.n_heads}, found {self.d_model}"
            )
        if self.n_heads % kv:
            raise ValueError(
                f"n_kv_heads: expected a divisor of n_heads={self.n_heads}, found {kv}"
            )
        for name in ("mlp", "norm", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected True or False, found {getattr(self, name)!r}")

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads (n_heads unless GQA)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_head(self) -> int:
        """Each head's width: d_model // n_heads."""
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class TrainConfig:
    """How to train: the task, steps, batch, Adam's settings, seed, dtype, what to keep."""

    task: str = "induction"
    steps: int = 3000
    batch: int = 64
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    seed: int = 0
    dtype: str = "float32"
    backend: str = "numpy"
    snapshot_every: int = 50  # keep the weights and the probe's attention every this many steps
    threads: int | None = None  # threads splitting each batch (None: one per core); the split
    # changes how float sums round, so a seeded run is bit for bit the same at the same count
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        check_positive_int(self.steps, "steps")
        check_positive_int(self.batch, "batch")
        check_positive_int(self.snapshot_every, "snapshot_every")
        if self.threads is not None:
            check_positive_int(self.threads, "threads")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed: expected an int >= 0, found {self.seed!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise ValueError(f"lr: expected a number in (0, 1), found {self.lr!r}")
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas: expected two numbers in [0, 1), found {self.betas!r}")
        check_choice(self.dtype, "dtype", DTYPES)
        check_choice(self.backend, "backend", BACKENDS)
        if not isinstance(self.model, ModelConfig):
            raise TypeError(f"model: expected a ModelConfig, found {type(self.model).__name__}")


__all__ = ["BACKENDS", "DTYPES", "ModelConfig", "TrainConfig"]
