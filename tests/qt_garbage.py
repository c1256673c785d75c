"""A Qt object that only the cyclic collector can free, and that notes the thread it died in."""

from __future__ import annotations

import threading

from PyQt6.QtCore import QObject


class Garbage(QObject):
    """A Qt object in a reference cycle: only the cyclic collector frees it; notes the thread."""

    def __init__(self, died_in: list[str]) -> None:
        super().__init__()
        self.died_in = died_in
        self.cycle = self

    def __del__(self) -> None:
        self.died_in.append(threading.current_thread().name)
