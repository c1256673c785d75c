"""A known mistake (one catalogue record) and the one engine that names a failing result by them.

Every catalogue (forward: diagnosis.py and variants.py; backward: backward_diagnosis.py;
variants, forward and backward: variant_diagnosis.py) lists `Mistake` records: a name and what
its family's planted kernel takes to plant it. `outputs` runs each record once per case;
`matches` compares a failing result with each output (structural_score: within the allowed
error, or 1/1000 of the planted output's distance from the truth, and told apart from the
truth in this case); `named` keeps a name only when the matches say one thing: a wrong name is
worse than none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from scratch.checker import ignored


class Mistake(NamedTuple):
    """One catalogue entry: a known mistake's name and how its family's planted kernel plants it
    (forward: a thunk; variant: a variant_numpy.Planted; backward: (key, block); the learners'
    gallery, scratch.learn.mistakes: (problem, is_causal) -> variants.attend's keywords, with the
    wrong line of code and what the example needs)."""

    name: str
    plant: object
    code: str = ""  # the wrong line, as a learner writes it (scratch.learn.mistakes)
    needs: str = ""  # "mask" / "causal": shown with the causal mask when the example lacks one


def outputs(memo: dict, key: object, catalogue: Callable, run: Callable) -> list[tuple]:
    """(name, run(plant)) of each Mistake of catalogue(), made once per case (kept in memo[key]);
    left out where run returns None or raises ValueError, TypeError or FloatingPointError (the
    case cannot show that mistake)."""
    if key not in memo:
        made = []
        for mistake in catalogue():
            try:
                out = run(mistake.plant)
            except (ValueError, TypeError, FloatingPointError):
                continue
            if out is not None:
                made.append((mistake.name, out))
        memo[key] = made
    return memo[key]


def one(matched: set[str]) -> str | None:
    """The one name matched, or None (two names alike: this case cannot tell which)."""
    return next(iter(matched)) if len(matched) == 1 else None


def matches(got, made: list, truth, bound, score=None) -> set[str]:
    """The one diagnosis engine: the names of the planted mistakes whose output got lands on,
    score(got, output, truth, bound) <= 2 (structural_score unless another is given)."""
    score = score or structural_score
    return {name for name, out in made if score(got, out, truth, bound) <= 2.0}


def named(got, made: list, truth, bound, *, score=None, pick=ignored.pick) -> str | None:
    """The name `pick` takes from the matches (ignored.pick: the one name, or the one saying a
    keyword is ignored; `one`: the one name), or None."""
    matched = matches(got, made, truth, bound, score)
    return pick(matched) if matched else None


def call(make: Callable) -> object:
    """A forward Mistake's output: its plant is a thunk."""
    return make()


def structural_score(got, variant, truth, bound) -> float:
    """max |got - variant| / max(bound, 1e-3 |variant - truth|): <= 2 is a match.

    Requires the variant to be told apart from the truth (somewhere > 4 bounds away) and NaN
    where the variant has NaN."""
    if variant.shape != got.shape:
        return math.inf
    with np.errstate(all="ignore"):
        vn, gn = np.isnan(variant), np.isnan(got)
        if np.any(vn != gn):
            return math.inf
        both = ~vn
        far = np.abs(variant - truth)
        tell = np.where(np.isnan(truth) | ~both, 0.0, far / np.maximum(bound, 1e-300))
        if not np.any(tell[both] > 4.0) and np.array_equal(vn, np.isnan(truth)):
            return math.inf  # this case cannot reveal this mistake
        err = np.abs(got - variant)[both]
        allowed = np.maximum(bound, 1e-3 * np.where(np.isfinite(far), far, 0.0))[both]
        if not np.all(np.isfinite(err)):
            same_inf = np.all((got[both] == variant[both]) | np.isfinite(err))
            if not same_inf:
                return math.inf
            err = np.where(np.isfinite(err), err, 0.0)
        ratio = np.where(err == 0, 0.0, err / np.where(allowed > 0, allowed, 1e-300))
        return float(np.max(ratio)) if ratio.size else math.inf


def precision_match(got, variant, truth, live) -> bool:
    """The error is the variant's error: |error - variant's error| <= 1/4 |variant's error|."""
    with np.errstate(all="ignore"):
        a = (got - truth)[live].ravel()
        b = (variant - truth)[live].ravel()
    if a.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return False
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return False
    return float(np.linalg.norm(a - b)) <= 0.25 * nb  # cosine >= 0.97, size within 25%


def precision_score(got, variant, truth, live) -> float:
    """matches()'s score for a precision mistake: 0 where precision_match holds, else inf."""
    return 0.0 if precision_match(got, variant, truth, live) else math.inf
