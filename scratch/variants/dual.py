"""Forward-mode dual numbers: the derivative of a score_mod, taken from the score_mod itself.

The backward needs d score_mod(score) / d score at every visible cell. We choose one mechanism
for built-in and user score_mods alike: call the very same function with a `Dual(score, 1.0)`
and read the derivative off the result. Why not a hand-written derivative per built-in? Because
then the backward is a second definition that can drift from the forward (softcap's missing
1 - tanh^2 is exactly that bug), and a user's own score_mod would have none. A dual number
carries (value, derivative) through +, -, *, /, ** and comparisons, and through the functions
here (tanh, exp, log, sqrt, where), which also take plain floats. `math.tanh(dual)` is refused
with a TypeError (Dual has no __float__) rather than silently dropping the derivative.

The value may also be a NumPy array or torch tensor (and these functions take arrays too), so a
score_mod called with `Dual(scores, 1.0)` gives every cell's derivative at once: the variants'
score_grad_array is this, not a derivative written out a second time.
"""

from __future__ import annotations

import math

from scratch.variants.arrays import module_of


class Dual:
    """value + grad * eps with eps^2 = 0: a number and its derivative with respect to the score."""

    __slots__ = ("value", "grad")

    def __init__(self, value: float, grad: float = 0.0):
        self.value, self.grad = value, grad

    def __repr__(self) -> str:
        return f"Dual({self.value!r}, {self.grad!r})"

    def __float__(self) -> float:
        raise TypeError(
            "score_mod: a math-module function got the score as a dual number (the backward "
            "differentiates score_mod this way); use scratch.variants.dual's tanh/exp/log/sqrt"
        )

    # ---- arithmetic: the chain rule, one line each
    def __add__(self, other: object) -> Dual:
        o = lift(other)
        return Dual(self.value + o.value, self.grad + o.grad)

    __radd__ = __add__

    def __sub__(self, other: object) -> Dual:
        o = lift(other)
        return Dual(self.value - o.value, self.grad - o.grad)

    def __rsub__(self, other: object) -> Dual:
        return lift(other) - self

    def __mul__(self, other: object) -> Dual:
        o = lift(other)
        return Dual(self.value * o.value, self.grad * o.value + self.value * o.grad)

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Dual:
        o = lift(other)
        return Dual(self.value / o.value, (self.grad * o.value - self.value * o.grad) / o.value**2)

    def __rtruediv__(self, other: object) -> Dual:
        return lift(other) / self

    def __pow__(self, n: float) -> Dual:
        if isinstance(n, Dual):
            raise TypeError("score_mod: a dual exponent is not supported; use exp(y * log(x))")
        return Dual(self.value**n, n * self.value ** (n - 1) * self.grad)

    def __neg__(self) -> Dual:
        return Dual(-self.value, -self.grad)

    def __pos__(self) -> Dual:
        return self

    def __abs__(self) -> Dual:
        return -self if self.value < 0 else self

    # ---- comparisons read the value (a branch picks a piece; its derivative follows)
    def __lt__(self, other: object) -> bool:
        return self.value < lift(other).value

    def __le__(self, other: object) -> bool:
        return self.value <= lift(other).value

    def __gt__(self, other: object) -> bool:
        return self.value > lift(other).value

    def __ge__(self, other: object) -> bool:
        return self.value >= lift(other).value

    def __eq__(self, other: object) -> bool:
        return self.value == lift(other).value

    __hash__ = None  # type: ignore[assignment]


def lift(x: object) -> Dual:
    """A Dual as it is, a plain number as a constant (derivative 0)."""
    if isinstance(x, Dual):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Dual(float(x), 0.0)
    if module_of(x) is not None:  # an array, tensor or NumPy scalar: a constant of its own type
        return Dual(x, 0.0)
    raise TypeError(f"score_mod: expected a number, found {type(x).__name__} {x!r}")


def value_and_grad(y: object) -> tuple[float, float]:
    """(value, d/d score) of what a score_mod returned for a Dual score (a constant: grad 0)."""
    d = lift(y)
    return d.value, d.grad


def derivative(score_mod, score: float, b: int, h: int, q_idx: int, kv_idx: int) -> float:
    """d score_mod(score, b, h, q_idx, kv_idx) / d score, by calling it with Dual(score, 1)."""
    return value_and_grad(score_mod(Dual(score, 1.0), b, h, q_idx, kv_idx))[1]


def _plain(name: str, x: object) -> object:
    """math's `name` of a Python number, or the array's own module's of an array."""
    if type(x) is float:
        return getattr(math, name)(x)
    xp = module_of(x)
    return getattr(math if xp is None else xp, name)(x)


def tanh(x: object) -> object:
    """tanh, with d tanh(x) = (1 - tanh(x)^2) dx."""
    if not isinstance(x, Dual):
        return _plain("tanh", x)
    t = tanh(x.value)
    return Dual(t, (1.0 - t * t) * x.grad)


def exp(x: object) -> object:
    """exp, with d exp(x) = exp(x) dx."""
    if not isinstance(x, Dual):
        return _plain("exp", x)
    e = exp(x.value)
    return Dual(e, e * x.grad)


def log(x: object) -> object:
    """log, with d log(x) = dx / x."""
    if not isinstance(x, Dual):
        return _plain("log", x)
    return Dual(log(x.value), x.grad / x.value)


def sqrt(x: object) -> object:
    """sqrt, with d sqrt(x) = dx / (2 sqrt(x))."""
    if not isinstance(x, Dual):
        return _plain("sqrt", x)
    r = sqrt(x.value)
    return Dual(r, x.grad / (2.0 * r))


def where(condition: object, a: object, b: object) -> object:
    """a if condition else b (as torch.where, cell by cell for an array condition; the
    derivative is the chosen branch's)."""
    xp = module_of(condition)
    if xp is None:
        return a if condition else b
    if not isinstance(a, Dual) and not isinstance(b, Dual):
        return xp.where(condition, a, b)
    a, b = lift(a), lift(b)
    return Dual(xp.where(condition, a.value, b.value), xp.where(condition, a.grad, b.grad))


__all__ = ["Dual", "derivative", "exp", "lift", "log", "sqrt", "tanh", "value_and_grad", "where"]
