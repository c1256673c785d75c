"""The window's recompute at 4096 tokens, for `python -m scratch.bench`: time and event-loop gaps.

A recompute is what the app does after an edit: TraceWorker runs controller.run (the backend's
trace, then the check against the ground truth: a seeded sample of rows at this size) in a
worker thread while the GUI thread keeps its event loop. Here a QTimer ticking every
TICK_MS records the largest gap between its ticks while the job runs (offscreen, no window),
and the backend's trace alone is timed in the same rounds, the order rotated.
"""

from __future__ import annotations

import dataclasses
import os
import time

TICK_MS = 5
WINDOW_TOKENS = 4096
RECOMPUTE_GOAL = 1.5  # recompute (trace + check) <= this x the backend's trace alone
GAP_GOAL_S = 0.100  # the event loop is never blocked longer than this
_app = None  # the QApplication measure() made or found


def _session(tokens: int):
    """A random projected session of `tokens` tokens on the NumPy backend in float32."""
    from gui.session import random_session

    s = random_session(0, num_tokens=tokens)
    return dataclasses.replace(s, backend="numpy", dtype="float32")


def _recompute(app, worker, session) -> tuple[float, float]:
    """(seconds from submit to the Outcome arriving, largest event-loop gap) for one job."""
    from PyQt6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    done: list[object] = []
    last, gap = [time.perf_counter()], [0.0]

    def tick() -> None:
        now = time.perf_counter()
        gap[0] = max(gap[0], now - last[0])
        last[0] = now

    def finish(outcome: object) -> None:
        done.append(outcome)
        loop.quit()

    timer = QTimer()
    timer.setInterval(TICK_MS)
    timer.timeout.connect(tick)
    worker.finished.connect(finish)
    worker.failed.connect(lambda message: (done.append(RuntimeError(message)), loop.quit()))
    timer.start()
    t0 = last[0] = time.perf_counter()
    worker.submit(session)
    loop.exec()
    seconds = time.perf_counter() - t0
    tick()  # the gap up to the end
    timer.stop()
    worker.finished.disconnect(finish)
    if isinstance(done[0], Exception):
        raise done[0]
    return seconds, gap[0]


def measure(rounds: int = 5, tokens: int = WINDOW_TOKENS) -> dict:
    """Best and every time of trace alone and recompute, the largest gap, the sample note."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PyQt6.QtWidgets import QApplication

    from gui import controller, core_api, sampled_check
    from gui.worker import TraceWorker

    global _app  # kept alive: a second measure() in this process reuses it (Qt's objects too)
    app = _app = QApplication.instance() or QApplication([])
    worker = TraceWorker()
    session = _session(tokens)
    kwargs = controller.trace_kwargs(session)
    traces, recomputes, gaps = [], [], []
    _recompute(app, worker, session)  # warm-up (imports, first allocations)
    for r in range(rounds):
        for what in ("trace", "recompute") if r % 2 == 0 else ("recompute", "trace"):
            if what == "trace":
                t0 = time.perf_counter()
                core_api.trace_with_backend(session.backend, session.dtype, **kwargs)
                traces.append(time.perf_counter() - t0)
            else:
                seconds, gap = _recompute(app, worker, session)
                recomputes.append(seconds)
                gaps.append(gap)
    worker.pool.waitForDone()
    return {
        "tokens": tokens,
        "trace": traces,
        "recompute": recomputes,
        "gaps": gaps,
        "sampled": sampled_check.describe(tokens) if sampled_check.wanted("numpy", tokens) else "",
    }


def goal_lines(result: dict) -> list[tuple[str, str, str]]:
    """(goal, PASS/FAIL, numbers) for the recompute time and the largest event-loop gap."""
    trace, recompute = min(result["trace"]), min(result["recompute"])
    ratio = recompute / trace
    per_round = sorted(r / t for r, t in zip(result["recompute"], result["trace"]))
    n = result["tokens"]
    return [
        (
            f"window recompute at {n} tokens (numpy float32 trace + check) <= "
            f"{RECOMPUTE_GOAL:g}x the backend's trace alone",
            "PASS" if ratio <= RECOMPUTE_GOAL else "FAIL",
            f"{ratio:.2f}x best vs best ({recompute:.2f} s vs {trace:.2f} s); per round "
            f"{per_round[0]:.2f}-{per_round[-1]:.2f}x over {len(per_round)} rounds; "
            f"check: {result['sampled'] or 'full ground truth'}",
        ),
        (
            f"event loop never blocked > {GAP_GOAL_S * 1000:.0f} ms during the recompute at "
            f"{n} tokens",
            "PASS" if max(result["gaps"]) <= GAP_GOAL_S else "FAIL",
            f"largest gap between {TICK_MS} ms timer ticks {max(result['gaps']) * 1000:.0f} ms "
            f"over {len(result['gaps'])} recomputes (offscreen, the result not drawn)",
        ),
    ]
