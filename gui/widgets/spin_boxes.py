"""Spin boxes whose tooltip says their range: a number typed past the maximum is cut short by
Qt's validator (99999 in a box up to 999 becomes 999) with no word of why, so the tooltip says
which numbers the box takes. The ranges themselves are the callers'."""

from __future__ import annotations

from PyQt6.QtWidgets import QDoubleSpinBox, QSpinBox


def range_text(lo: float, hi: float) -> str:
    """'takes 0 to 999' (whole numbers as such, others as few digits as they need)."""
    return f"takes {lo:.12g} to {hi:.12g}"


class _SaysRange:
    """Mixin: setToolTip sets what the box is about; the tooltip shown adds its range, kept
    up to date by setRange, setMinimum and setMaximum."""

    _about = ""

    def setToolTip(self, text: str) -> None:
        self._about = text
        self._say_range()

    def setRange(self, lo, hi) -> None:
        super().setRange(lo, hi)
        self._say_range()

    def setMinimum(self, lo) -> None:
        super().setMinimum(lo)
        self._say_range()

    def setMaximum(self, hi) -> None:
        super().setMaximum(hi)
        self._say_range()

    def about(self) -> str:
        """The tooltip without its range."""
        return self._about

    def _say_range(self) -> None:
        span = range_text(self.minimum(), self.maximum())
        super().setToolTip(f"{self._about} ({span})" if self._about else span)

    def _setup(self, lo, hi, tip: str, tracking: bool) -> None:
        """The range (when given), what the box is about, and whether every keystroke counts
        (tracking False: one change per finished number)."""
        if lo is not None:
            self.setRange(lo, hi)
        self.setToolTip(tip)
        self.setKeyboardTracking(tracking)


class SpinBox(_SaysRange, QSpinBox):
    """A QSpinBox whose tooltip ends with its range."""

    def __init__(
        self, lo: int | None = None, hi: int = 99, tip: str = "", tracking: bool = True
    ) -> None:
        super().__init__()
        self._setup(lo, hi, tip, tracking)


class DoubleSpinBox(_SaysRange, QDoubleSpinBox):
    """A QDoubleSpinBox whose tooltip ends with its range."""

    def __init__(
        self, lo: float | None = None, hi: float = 99.0, tip: str = "", tracking: bool = True
    ) -> None:
        super().__init__()
        self._setup(lo, hi, tip, tracking)
