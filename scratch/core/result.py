"""Result of an attention call: unpacks as (output, weights), or (output, lse) with
return_lse=True, and says which kernel ran."""

from __future__ import annotations


class _Pair(tuple):
    """A pair whose first entry is the attention output, with the kernel that produced it."""

    kernel: str
    detail: str  # how the kernel ran where that depends on the host ("" when it does not)

    @property
    def output(self) -> object:
        """The attention output `(..., L, Ev)`."""
        return self[0]


class Result(_Pair):
    """An `(output, weights)` pair that also records which kernel produced it."""

    def __new__(cls, output: object, weights: object, kernel: str, detail: str = "") -> Result:
        self = super().__new__(cls, (output, weights))
        self.kernel = kernel
        self.detail = detail
        return self

    @property
    def weights(self) -> object:
        """The attention weights `(..., L, S)`, or None when they were not asked for."""
        return self[1]

    def __getnewargs__(self) -> tuple[object, object, str, str]:
        """What copy and pickle pass to __new__ to rebuild the result."""
        return self[0], self[1], self.kernel, self.detail

    def __repr__(self) -> str:
        return f"Result(kernel={self.kernel!r}, output={self[0]!r}, weights={self[1]!r})"


class LseResult(_Pair):
    """An `(output, lse)` pair from `return_lse=True`, with the weights and the kernel too."""

    weights: object  # (..., L, S) from the explicit kernels, None from the output-only ones

    def __new__(
        cls, output: object, lse: object, weights: object, kernel: str, detail: str = ""
    ) -> LseResult:
        self = super().__new__(cls, (output, lse))
        self.weights, self.kernel, self.detail = weights, kernel, detail
        return self

    @property
    def lse(self) -> object:
        """log sum_j exp(masked_ij) per row `(..., L)`: natural log, -inf on fully masked rows."""
        return self[1]

    def __getnewargs__(self) -> tuple[object, object, object, str, str]:
        """What copy and pickle pass to __new__ to rebuild the result."""
        return self[0], self[1], self.weights, self.kernel, self.detail

    def __repr__(self) -> str:
        return f"LseResult(kernel={self.kernel!r}, output={self[0]!r}, lse={self[1]!r})"
