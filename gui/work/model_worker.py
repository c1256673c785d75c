"""Loads a model and runs a text off the GUI thread; only the newest request's result arrives."""

from __future__ import annotations

from dataclasses import dataclass

from PyQt6.QtCore import QObject

import scratch
from gui.state.model_session import kv_heads_of, start_model
from gui.work.jobs import Worker

TOP = 10  # next tokens in the bar chart


@dataclass(frozen=True)
class DecoderFrame:
    """What the Model tab shows of a decoder after the prompt or a Generate step (built in the
    worker, so the GUI thread only draws)."""

    decoding: object  # scratch.models.decoding.Decoding: the prompt, new tokens, cache
    attentions: object  # (layers, heads, S, S): the prompt's weights and each new token's row
    top: list  # [(token, probability)]: the TOP likeliest next tokens
    kv_heads: list  # query head h reads key/value head kv_heads[h]
    tokens: list  # every token so far, each decoded on its own


def frame(decoding: object) -> DecoderFrame:
    """The views' data of a Decoding (assembled weights, next tokens, head groups)."""
    model = decoding.prompt.model
    return DecoderFrame(
        decoding,
        decoding.attentions(),
        decoding.next_tokens(TOP),
        kv_heads_of(model),
        decoding.tokens,
    )


class ModelWorker(Worker):
    """Runs models.load(path).run(text) in a pool thread (the window never freezes); finished
    carries a scratch.models.Run, or a DecoderFrame for a decoder."""

    WAIT_MS = 120000
    QUIET = (scratch.Cancelled,)  # a Cancel: the job ends at its next piece, without a word

    def __init__(self, parent: QObject | None = None) -> None:
        # one model in memory at a time (requests queue); a model or text that cannot run
        super().__init__(parent, threads=1, said=(ValueError, TypeError, OSError, RuntimeError))

    def submit(self, path: str, text: str) -> int:
        """Load (once per directory) and run; an older pending result is dropped. progress
        carries the stage (hash check, read, dequantize, tokenizer, forward) in thousandths;
        cancel() stops the load at its next piece (nothing half-read is kept)."""
        directory = None if path in ("", "default") else path

        def work(report, stop) -> object:
            def thousandths(stage: str, done: int, total: int) -> None:
                report(1000 * done // total if total else 1000, 1000, stage)  # int32 for Qt

            result = start_model(directory, text, scratch.Progress(thousandths, stop))
            return frame(result) if hasattr(result, "extend") else result

        return self.start(work)

    def extend(self, decoding: object, temperature: float, seed: int | None) -> int:
        """One more token after a Decoding (greedy at temperature 0, else seeded sampling)."""
        return self.start(lambda report, stop: frame(decoding.extend(temperature, seed)))

    def open_head(self, source: object, layer: int, head: int) -> int:
        """The window session of one head of a Run or a Decoding (a decoder's: every token so
        far run again as one text)."""
        from gui.state.model_session import head_session

        def work(report, stop) -> object:
            run = source.run() if hasattr(source, "extend") else source
            return head_session(run, layer, head)

        return self.start(work)

    def describe(self, exc: Exception) -> str | None:
        """What the user reads for a model or text that cannot run."""
        if isinstance(exc, ImportError):
            return f"real models need {exc.name}: run make run"
        return super().describe(exc)
