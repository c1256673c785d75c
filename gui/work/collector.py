"""Python's cyclic garbage collector runs only in the GUI thread, between events, while the
app lives.

Left automatic, a collection starts at whichever allocation trips a threshold: inside a paint event
(pyqtgraph's ImageItem.paint allocates) it can free a window that only a reference cycle kept
alive, the very window being painted, and QPainter then draws through a freed paint engine (the
segfault in tests after a window test's body returned). So automatic collection is off while a
QApplication lives, and a timer in the GUI thread collects what the thresholds would have, as
pyqtgraph's own GarbageCollector does; jobs' collector pause (gui.work.jobs) never turns it back on.
"""

from __future__ import annotations

import gc

from PyQt6.QtCore import QObject, QTimer

from gui.work.jobs import collector_pause

INTERVAL_MS = 1000  # how often the GUI thread looks at the collector's counts


class GuiCollector(QObject):
    """Owns garbage collection for the app: automatic collection off, a GUI-thread timer on."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)  # made in the GUI thread (the app's): the timer fires there
        gc.disable()
        collector_pause().app_owns = True
        self.destroyed.connect(_released)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        self.timer.start(INTERVAL_MS)

    def check(self) -> None:
        """Collect the oldest generation whose count passed its threshold, unless a job runs."""
        if collector_pause().jobs():
            return  # a computation allocates: collect once it has ended (as automatic gc would)
        collect_due()


_collector: GuiCollector | None = None


def _released() -> None:
    collector_pause().app_owns = False


def collect_due() -> None:
    """Collect (here, in the calling GUI thread) the oldest generation past its threshold."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    for generation in (2, 1, 0):
        if counts[generation] > thresholds[generation]:
            gc.collect(generation)
            return


def own_collection(app: QObject) -> GuiCollector:
    """Give `app` (the QApplication, in the GUI thread) the collector; once per app."""
    global _collector
    if _collector is None or _collector.parent() is not app:
        _collector = GuiCollector(app)
    return _collector


def owned() -> bool:
    """True while an app owns garbage collection (automatic collection must stay off)."""
    return collector_pause().app_owns
