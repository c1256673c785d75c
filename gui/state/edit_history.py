"""Undo and redo for the inputs: the states the inputs panel showed, newest last. No Qt.

A state is whatever the panel hands in (a frozen Session and what shrinking it had cut off):
nothing is copied or rebuilt, so undo gives back the exact values. The oldest states go first
when there are more than `limit` of them or their tables hold more than `budget` cells (a
4096-token example holds millions: a hundred of those would not fit in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

State = TypeVar("State")


class History(Generic[State]):
    """Two stacks of states: undo pops the newest edit's state before, redo the undone one."""

    def __init__(
        self, size: Callable[[State], int], limit: int = 100, budget: int = 20_000_000
    ) -> None:
        if limit < 1 or budget < 1:
            raise ValueError(f"History: expected limit and budget >= 1, found {limit}, {budget}")
        self.size = size  # cells a state holds
        self.limit = limit
        self.budget = budget
        self._undo: list[State] = []
        self._redo: list[State] = []

    def can_undo(self) -> bool:
        """Whether there is an edit to undo."""
        return bool(self._undo)

    def can_redo(self) -> bool:
        """Whether there is an undone edit to redo."""
        return bool(self._redo)

    def record(self, before: State) -> None:
        """An edit was made: `before` is the state it replaced; the redo stack is dropped."""
        self._undo.append(before)
        self._redo.clear()
        self._trim()

    def undo(self, now: State) -> State | None:
        """The state before the newest edit (None: nothing to undo); `now` can be redone."""
        if not self._undo:
            return None
        self._redo.append(now)
        return self._undo.pop()

    def redo(self, now: State) -> State | None:
        """The state the newest undo left (None: nothing to redo); `now` can be undone."""
        if not self._redo:
            return None
        self._undo.append(now)
        return self._redo.pop()

    def _trim(self) -> None:
        """Drop the oldest states past the limit or the cell budget (the newest always stays)."""
        while len(self._undo) > self.limit:
            self._undo.pop(0)
        total = sum(self.size(state) for state in self._undo)
        while len(self._undo) > 1 and total > self.budget:
            total -= self.size(self._undo.pop(0))
