"""Adam (Kingma and Ba 2015) written out: the optimizer the reference run uses (lr 1e-3)."""

from __future__ import annotations

import numpy as np


class Adam:
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr m_hat / (sqrt(v_hat) + eps)."""

    def __init__(self, params: dict, lr: float, betas: tuple[float, float], eps: float) -> None:
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}  # first moment
        self.v = {k: np.zeros_like(v) for k, v in params.items()}  # second moment
        self.t = 0  # steps taken

    def step(self, params: dict, grads: dict) -> None:
        """Move every parameter in place by one Adam step."""
        self.t += 1
        b1, b2 = self.b1, self.b2
        # the bias corrections 1 - b^t, folded into the step size as PyTorch's Adam does
        size = self.lr / (1 - b1**self.t)
        root = np.sqrt(1 - b2**self.t)
        for name, p in params.items():
            g, m, v = grads[name], self.m[name], self.v[name]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            p -= (size * m / (np.sqrt(v) / root + self.eps)).astype(p.dtype, copy=False)

    def state(self) -> dict:
        """The moments and the step count (to resume a run bit for bit)."""
        return {"t": self.t, "m": self.m, "v": self.v}


__all__ = ["Adam"]
