"""A model's token as a readable label (no Qt): visible spaces, escaped line breaks, cut short."""

from __future__ import annotations

LONGEST = 14  # characters of a label; longer ones end in an ellipsis


def readable(token: str, longest: int = LONGEST) -> str:
    """' Paris' -> '␣Paris', '\\n' -> '\\\\n'; a label longer than `longest` ends in '…'."""
    text = token.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return text if len(text) <= longest else text[: longest - 1] + "…"


def session_label(token: str) -> str:
    """`readable`, and a label the session's comma-separated label line can hold: a comma
    becomes '‚' (U+201A, a low quotation mark that looks like one), nothing becomes '∅'."""
    text = readable(token).replace(",", "\u201a")
    return text or "\u2205"
