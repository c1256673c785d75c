"""A mask variant's parameters as data: what the picker, the session file and the checker read.

A mask variant declares `key` (its name in the picker and in session files), `label` (the
picker's words) and `params`, one `Param` per number it takes; every other reader derives its
part from these (see registry.py): the picker's rows and tips, VariantChoice's fields and their
JSON checks, the checker's case and the mistakes it names (each parameter off by one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One parameter of a mask variant: an integer, or a list of integers (default a tuple).

    Attributes:
        name: the variant's field.
        default: VariantChoice's default, and the checker case's value.
        least: the smallest value the variant takes (a list: none).
        words: the picker's tip (and VariantChoice's docstring's words for the field).
        choice: the field in VariantChoice and session files ('': name).
        blank: an empty list's text in the picker ('{tokens}': the session's tokens).
        named: the picker's row label and the name a refusal gives ('': the key).
    """

    name: str  # the variant's field
    default: int | tuple[int, ...]  # VariantChoice's default, and the checker case's value
    least: int = 0  # the smallest value the variant takes (a list: none)
    words: str = ""  # the picker's tip
    choice: str = ""  # the field in VariantChoice and session files ('' : name)
    blank: str = ""  # an empty list's text in the picker ('{tokens}': the session's tokens)
    named: str = ""  # the picker's row label and the name a refusal gives ('' : the key)

    @property
    def key(self) -> str:
        """The field's name in VariantChoice, session files and the picker."""
        return self.choice or self.name

    @property
    def label(self) -> str:
        """The picker's row label and the name a refusal gives ('sink tokens')."""
        return self.named or self.key

    @property
    def is_list(self) -> bool:
        """A list of integers (cu_seqlens), not one integer."""
        return isinstance(self.default, tuple)

    def text(self, value: object) -> str:
        """value as the picker's text box shows it.

        Args:
            value: the parameter's value (an int, or a tuple of ints for a list).
        """
        return ", ".join(map(str, value)) if self.is_list else str(value)

    def parse(self, text: str) -> int | tuple[int, ...]:
        """The picker's text as a value; ValueError naming the field.

        Args:
            text: what the picker's text box holds ("4", or "3, 5" for a list).
        """
        try:
            if self.is_list:
                return tuple(int(t) for t in text.replace(",", " ").split())
            return int(text.strip())
        except ValueError:
            what = "integers separated by commas" if self.is_list else "an integer"
            raise ValueError(f"{self.label}: expected {what}, found {text!r}") from None


__all__ = ["Param"]
