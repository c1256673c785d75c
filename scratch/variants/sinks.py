"""Learned attention sinks (gpt-oss): one logit per head added to the softmax's denominator.

weights[i][j] = exp(s_ij) / (sum_k exp(s_ik) + exp(sink[h])): the sink is a key that every
query sees, with a learned score and no value, so a row's weights sum to less than 1 and a
head can attend to "nothing". It is not a score_mod or mask_mod; flex_attention takes it as
`sinks=` (a list of one logit per query head, or this object). The lse includes the sink; a
row with every key masked gives output 0 and lse = sink[h].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratch.variants.base import Variant, number


@dataclass(frozen=True)
class LearnedSinks(Variant):
    """One sink logit per query head, added to the softmax's denominator (no value).

    A Variant with neither mod, so it combines with masks and score changes
    (`combine(SlidingWindow(2, 0), Softcap(30), LearnedSinks([0.5]))`); the ground truth's trace
    reads it from Options.variant, flex_attention from `sinks=`.

    Attributes:
        logits: one sink logit per query head.
    """

    logits: tuple[float, ...]

    def __post_init__(self):
        ok = (
            isinstance(self.logits, (list, tuple))
            and self.logits
            and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in self.logits
            )
        )
        if not ok:
            raise ValueError(f"sinks: expected one finite logit per head, found {self.logits!r}")
        object.__setattr__(self, "logits", tuple(float(x) for x in self.logits))

    def check(self, B: int | None, H: int | None, L: int, S: int) -> None:
        if H is not None and len(self.logits) != H:
            raise ValueError(
                f"sinks: expected one logit per query head ({H}), found {len(self.logits)}"
            )

    def rule(self) -> str:
        return "learned sinks: + exp(sink[h]) in each row's denominator, " + ", ".join(
            map(number, self.logits)
        )


def sink_logits(sinks: object, H: int) -> list[float] | None:
    """The sink logits for H query heads (None when there are none)."""
    if sinks is None:
        return None
    logits = list((sinks if isinstance(sinks, LearnedSinks) else LearnedSinks(sinks)).logits)
    if len(logits) != H:
        raise ValueError(f"sinks: expected one logit per query head ({H}), found {len(logits)}")
    return logits
