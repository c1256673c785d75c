"""SmolLM2-135M's goals against transformers float64, timed in the same run: a bench plugin.

`python -m scratch.bench --plugin scratch.bench.smollm2_goal --only smollm2` (`make bench` loads
it): load + dequantize (<= 5 s), a 128-token run (<= 2 s) and one cached generation step
(<= 0.2 s), each also not slower than transformers' float64 LlamaForCausalLM; the run and the step
are judged by the median of their per-round ratios (how and why: docs/notes/bench.md).
"""

from __future__ import annotations

import gc
import statistics
import time

from scratch.bench.host import LOAD_WAIT_S
from scratch.bench.memory import format_bytes, peak_growth
from scratch.bench.plugins import Goal, GoalSet
from scratch.bench.row import PairRatio, pair_ratio
from scratch.bench.timing import measure_alternating

LOAD_GOAL_S, RUN_GOAL_S, STEP_GOAL_S = 5.0, 2.0, 0.2
RUN_TOKENS = 128
LOAD_ROUNDS, RUN_ROUNDS, STEP_ROUNDS = 2, 18, 16  # 18: whole cycles of 3 rows' balanced orders
TEXT = (
    "Attention lets each token of a sentence look back at the tokens before it, weigh them "
    "and mix their values into its own row. A decoder does this in every layer and every head, "
    "then turns the last row into a guess at the next word. "
)
NAMES = (
    f"SmolLM2 load + dequantize to float64 <= {LOAD_GOAL_S:g} s, not slower than transformers",
    f"SmolLM2 {RUN_TOKENS}-token run <= {RUN_GOAL_S:g} s, not slower than transformers float64",
    f"SmolLM2 one cached generation step <= {STEP_GOAL_S:g} s, not slower than transformers",
)
NOISE_NAME = f"(noise floor, no goal) the SmolLM2 {RUN_TOKENS}-token run against itself"


def _line(
    name: str,
    goal_s: float,
    ours: list[float],
    theirs: list[float],
    extra: str,
    paired: PairRatio | None = None,
) -> Goal:
    """PASS when our median is within the goal and no slower than transformers: by the median of
    per-round ratios when `paired` (rows timed in the same rounds), else by median vs median."""
    mine, other = statistics.median(ours), statistics.median(theirs)
    if paired is not None and paired.median is not None:
        speed = paired.median  # transformers' time / ours: at least 1 to pass
        ratio = (
            f"median of {paired.rounds} alternating rounds {speed:.3f}x (range "
            f"{paired.low:.2f}-{paired.high:.2f}x; medians apart {other / mine:.3f}x)"
        )
    else:
        speed = other / mine
        ratio = f"{speed:.2f}x median vs median"
    status = "PASS" if mine <= goal_s and speed >= 1.0 else "FAIL"
    detail = (
        f"NumPy {mine:.3f} s median, {min(ours):.3f} s best of {len(ours)}; transformers "
        f"{other:.3f} s median, {min(theirs):.3f} s best of {len(theirs)}; transformers' time "
        f"/ ours: {ratio}{extra}"
    )
    return name, status, detail


def _noise(again: PairRatio) -> Goal:
    """Our run timed twice per round: the spread the paired statistic shows for equal calls."""
    return (
        NOISE_NAME,
        "info",
        f"median of {again.rounds} rounds {again.median:.3f}x the time (range "
        f"{again.low:.2f}-{again.high:.2f}x); 1.000x if timing were exact",
    )


def _text(model: object) -> str:
    """A text of exactly RUN_TOKENS tokens (TEXT repeated, cut at a token, checked)."""
    ids = model.tokenize(TEXT * 8)[1][:RUN_TOKENS]
    text = model.tokenizer.decode(ids)
    if len(model.tokenize(text)[1]) != RUN_TOKENS:
        raise RuntimeError(f"the bench text is not {RUN_TOKENS} tokens long")
    return text


def _transformers_load(path: object) -> object:
    """transformers' own GGUF loader, in float64, eager attention (weights it can return)."""
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float64
    )
    hf.set_attn_implementation("eager")
    return hf.eval().requires_grad_(False)


def smollm2_goals(load_wait_s: float | None = LOAD_WAIT_S) -> list[Goal]:
    """The three goal lines and the run's noise-floor line, measured (about a minute), or why
    not."""
    try:
        import torch
        import transformers  # noqa: F401

        from scratch import models
        from scratch.backends import numpy_llama
        from scratch.models.gguf_file import smollm2_path
        from scratch.models.model import _load_packaged

        path = smollm2_path()
    except (ImportError, ValueError) as exc:
        why = f"needs torch, transformers and SmolLM2: {exc}"
        return [(name, "not measured", why) for name in NAMES + (NOISE_NAME,)]

    loads: dict[str, list[float]] = {"ours": [], "theirs": []}
    peaks: dict[str, int | None] = {}
    box: list = []  # transformers' model, loaded once between our loads
    for n in range(LOAD_ROUNDS):
        _load_packaged.cache_clear()  # cold: read, hash-check, dequantize every time
        gc.collect()
        t0 = time.perf_counter()
        peak = peak_growth(lambda: models.load("smollm2"), "rss")
        loads["ours"].append(time.perf_counter() - t0)
        peaks["ours"] = peak if n == 0 else peaks["ours"]  # the first: a fresh process's growth
        if n == 0:
            gc.collect()
            t0 = time.perf_counter()
            peaks["theirs"] = peak_growth(lambda: box.append(_transformers_load(path)), "rss")
            loads["theirs"].append(time.perf_counter() - t0)
    hf = box[0]
    memory = (
        f"; peak memory (RSS growth) NumPy {format_bytes(peaks['ours'])}, transformers "
        f"{format_bytes(peaks['theirs'])}"
    )
    lines = [_line(NAMES[0], LOAD_GOAL_S, loads["ours"], loads["theirs"], memory)]

    model = models.load("smollm2")
    text = _text(model)
    ids = model.tokenize(text)[1]
    x = torch.tensor([ids])
    with torch.no_grad():
        ours, theirs, again = measure_alternating(
            RUN_TOKENS,
            [("numpy", lambda: model.run(text), "n/a"),
             ("transformers", lambda: hf(x, output_attentions=True), "n/a"),
             ("numpy again", lambda: model.run(text), "n/a")],
            RUN_ROUNDS, load_wait_s,
        )  # fmt: skip
    lines.append(
        _line(NAMES[1], RUN_GOAL_S, ours.times, theirs.times, "", pair_ratio(ours, theirs))
    )
    noise = _noise(pair_ratio(ours, again))

    _, _, logits, cache = numpy_llama.step(model.config, model.weights, ids)
    new = [int(logits[-1].argmax())]
    with torch.no_grad():
        out = hf(x, use_cache=True)
        past = out.past_key_values
        token = torch.tensor([new])

        def their_step() -> None:
            hf(token, past_key_values=past, use_cache=True, output_attentions=True)
            past.crop(-1)  # back to the prompt's RUN_TOKENS entries (views: microseconds)

        ours, theirs = measure_alternating(
            RUN_TOKENS,
            [("numpy", lambda: numpy_llama.step(model.config, model.weights, new, cache), "n/a"),
             ("transformers", their_step, "n/a")],
            STEP_ROUNDS, load_wait_s,
        )  # fmt: skip
    where = f" (the step after {RUN_TOKENS} tokens)"
    step = pair_ratio(ours, theirs)
    lines.append(_line(NAMES[2], STEP_GOAL_S, ours.times, theirs.times, where, step))
    return lines + [noise]


BENCH_GOALS = (GoalSet("smollm2", "SmolLM2-135M against transformers float64", smollm2_goals),)
