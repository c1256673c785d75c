"""Benchmark: every attention kernel here on the same inputs, one table from one run.

    python -m scratch.bench                 # L in 64 ... 32768 (a few minutes)
    python -m scratch.bench --quick         # a few seconds: small sizes only, no goal
    python -m scratch.bench --sizes 256,4096 --repeats 5 --markdown
    python -m scratch.bench --sizes 16384    # one goal's rows alone (here numpy vs SDPA)
    python -m scratch.bench --plugin gui.app.bench_window            # + the window's goals
    python -m scratch.bench --plugin gui.app.bench_window --only window   # those goals alone

The rows are contenders.py's; the table's footer says how they are timed and judged, and
docs/notes/bench.md the measurements behind each rule. Modules: contenders and pure_backward (the
rows), groups (the rows timed together), host (host line, load check), memory (peak memory), row
(Row, paired ratios, goal lines), timing (measure, interleaved rounds), table (run_table), goals,
report (the table's text), model_goal and checker_goal (goals outside the table), plugins (goals
from outside scratch, such as the window's), cli.
"""

from scratch.bench.cli import main
from scratch.bench.goals import goals
from scratch.bench.model_goal import MODEL_TEXT, model_timing
from scratch.bench.report import format_table
from scratch.bench.row import Row
from scratch.bench.table import run_table

__all__ = ["MODEL_TEXT", "Row", "format_table", "goals", "main", "model_timing", "run_table"]
