"""Benchmark: every attention kernel here on the same inputs, one table from one run.

    python -m scratch.bench                 # L in 64 ... 32768 (a few minutes)
    python -m scratch.bench --quick         # a few seconds: small sizes only, no goal
    python -m scratch.bench --sizes 256,4096 --repeats 5 --markdown
    python -m scratch.bench --sizes 16384    # one goal's rows alone (here numpy vs SDPA)
    python -m scratch.bench --plugin gui.bench_window            # + the window's goals
    python -m scratch.bench --plugin gui.bench_window --only window   # those goals alone

Rows: the ground truth (plain Python, fsum), the pure-Python kernel limit (just the two matrix
products q @ k^T and weights @ v as fsum dot products: the floor for any plain-Python
attention), NumPy explicit and chunked, NumPy's two matmuls alone at full size (q @ k^T and
scores @ v into an (L, S) buffer, no softmax: a reference, not a ceiling), torch explicit (the
torch backend), the torch backend's fast path and a bare
`torch.nn.functional.scaled_dot_product_attention`. E = 64, float32 (the plain-Python rows take
the same float32 values as Python floats).

Rows whose ratio is a goal are timed interleaved (one call each per round, in balanced orders,
a load check before each round) and the goal is judged on the two rows' 10th
percentile times (the least disturbed runs, not the one luckiest), with best vs best and the
median of the per-round ratios and its range beside it; the plain-Python pair's goal is judged
by that median (PAIRED_MEDIAN_GOALS). The host is recorded in the footer.

Modules: contenders (the rows), host (host line, load check), memory (peak memory), stats
(10th percentile, paired ratios), row (Row), timing (measure, interleaved rounds), groups (the
rows timed together), table (run_table), goals, report (the table's text), model_goal (the real
model's load), plugins (goals from outside scratch, such as the window's), cli.
"""

from scratch.bench.cli import main
from scratch.bench.goals import goals
from scratch.bench.model_goal import MODEL_TEXT, model_timing
from scratch.bench.report import format_table
from scratch.bench.row import Row
from scratch.bench.table import run_table

__all__ = ["MODEL_TEXT", "Row", "format_table", "goals", "main", "model_timing", "run_table"]
