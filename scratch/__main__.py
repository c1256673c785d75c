"""Terminal trace: `python -m scratch [PRESET]` prints every attention step of a preset.

Each step shows its name, formula, note and matrix (aligned columns, token labels on the
query and key axes); the weights get a `sum` column (each row should sum to 1), and the end
says which key each query attends to most. `--list` lists the presets. `--backward` goes on
with the backward steps for a dO chosen by `--grad-output` (ones, random with `--seed`, or the
gradient of one output entry, `target` at `--target-cell I,C`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scratch.backward.grad_output import GRAD_OUTPUT_KINDS, make_grad_output, one_hot
from scratch.learn import presets
from scratch.trace.forward import trace_attention
from scratch.trace.steps import call_of, heading

if TYPE_CHECKING:
    from scratch.trace.forward import Step, Trace

# Column/row labels for axes that carry no tokens: c = feature index, m = model index.
_PREFIX = {"feature": "c", "model": "m", "head": "head "}


def _num(v: float, decimals: int) -> str:
    """One number with a fixed count of decimals; -inf, inf and nan spelled out."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    text = f"{v:.{decimals}f}"
    # a value that rounds to zero prints as 0.000..., never -0.000...
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_matrix(
    rows: Sequence[Sequence[float]],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    decimals: int = 4,
    *,
    row_sums: bool = False,
    indent: str = "  ",
) -> str:
    """A matrix as aligned text: labels on top and left, numbers right-aligned per column."""
    header = [""] + list(col_labels)
    body = [
        [label] + [_num(v, decimals) for v in row]
        for label, row in zip(row_labels, rows, strict=True)
    ]
    if row_sums:
        header += ["|", "sum"]
        for cells, row in zip(body, rows, strict=True):
            cells += ["|", _num(math.fsum(row), decimals)]
    table = [header] + body
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    lines = []
    for r in table:
        first = r[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(indent + "  ".join([first, *rest]).rstrip())
    return "\n".join(lines)


def _format_value(trace: Trace, step: Step, decimals: int) -> str:
    """A step's value: one table for a matrix, one table per head (or leading index) above."""
    value, axes = step.tolist(), step.axes
    first = trace.axis_labels(axes[0], len(value), _PREFIX.get(axes[0], ""))  # along axis 0
    if len(axes) == 1:  # a single row (row_dot, a bias's gradient): a 1 x n matrix
        return format_matrix([value], [step.name], first, decimals)
    if len(axes) > 2:
        blocks = []
        for label, sub in zip(first, value, strict=True):
            inner = type(step)(step.name, step.formula, sub, step.note, axes[1:])
            blocks.append(f"  {label}:\n" + _format_value(trace, inner, decimals))
        return "\n".join(blocks)
    n_cols = len(value[0]) if value else 0
    return format_matrix(
        value,
        first,
        trace.axis_labels(axes[1], n_cols, _PREFIX.get(axes[1], "")),
        decimals,
        row_sums=step.name == "weights",
    )


def _join_names(names: Sequence[str]) -> str:
    """'a', 'a' and 'b', 'a', 'b' and 'c'."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def attends_most(trace: Trace, decimals: int = 4) -> list[str]:
    """One sentence per query (per head): the key(s) with the largest weight."""
    weights = trace["weights"].tolist()
    blocks = weights if len(trace["weights"].axes) == 3 else [weights]
    lines = []
    for h, block in enumerate(blocks):
        prefix = f"head {h}: " if len(blocks) > 1 else ""
        for query, row in zip(trace.tokens, block, strict=True):
            if any(math.isnan(w) for w in row) or not any(row):
                lines.append(f"{prefix}{query!r} attends to no key (every key is masked)")
                continue
            top = max(row)
            # exact ties are real here: equal scores give bit-identical weights
            keys = [k for k, w in zip(trace.key_tokens, row, strict=True) if w == top]
            each = " each" if len(keys) > 1 else ""
            lines.append(
                f"{prefix}{query!r} attends most to {_join_names(keys)}"
                f" ({_num(top, decimals)}{each})"
            )
    return lines


def format_trace(trace: Trace, decimals: int = 4) -> str:
    """The whole trace as text, step by step, then who attends to whom (then the backward)."""
    names = trace.names()
    split = names.index("grad_output") if "grad_output" in names else len(names)
    parts = _format_steps(trace, trace.steps[:split], decimals)
    if "weights" in trace:
        parts.append("who attends to whom\n" + "\n".join("  " + s for s in attends_most(trace)))
    if split < len(names):
        parts.append("backward: the gradients, from dO = grad_output back to the inputs")
        parts += _format_steps(trace, trace.steps[split:], decimals)
    return "\n\n".join(parts) + "\n"


def _format_steps(trace: Trace, steps: Sequence[Step], decimals: int) -> list[str]:
    """One text block per step, headed by its number in the registry (scratch.trace.steps)."""
    call = call_of(trace)
    parts = []
    for step in steps:
        shape = " x ".join(str(d) for d in step.shape)
        axes = " x ".join(step.axes)
        parts.append(
            f"{heading(call, trace.names(), step.name)}  ({shape}: {axes})\n"
            f"  {step.formula}\n"
            f"  {step.note}\n" + _format_value(trace, step, decimals)
        )
    return parts


def format_header(preset: presets.Preset) -> str:
    """Title, source, scale and notes of a preset."""
    lines = [preset.title, f"  preset: {preset.name}", f"  source: {preset.source}"]
    lines.append(f"  scale: {preset.scale:.6g}")
    lines += [f"  note: {note}" for note in (*preset.notes, *preset.slip_notes())]
    return "\n".join(lines) + "\n"


def format_list() -> str:
    """Preset names and titles, one a line."""
    names = presets.names()
    width = max(len(n) for n in names)
    return "\n".join(f"{n.ljust(width)}  {presets.get(n).title}" for n in names) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scratch",
        description="Print every step of attention on a worked example from the seed notebooks.",
    )
    default = presets.DEFAULT
    parser.add_argument("preset", nargs="?", default=default, help=f"a preset (default {default})")
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    parser.add_argument(
        "--decimals", type=int, default=4, choices=range(0, 13), metavar="N", help="0..12"
    )
    parser.add_argument(
        "--backward", action="store_true", help="go on with the backward steps (the gradients)"
    )
    parser.add_argument(
        "--grad-output", choices=GRAD_OUTPUT_KINDS, default=None,
        help="dO for --backward: ones (default), random (with --seed), or target",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="seed of --grad-output random")
    parser.add_argument(
        "--target-cell", default=None, metavar="I,C",
        help="--grad-output target: dO is 1 at output[I][C], 0 elsewhere (default 0,0)",
    )  # fmt: skip
    return parser


def _grad_output(
    parser: argparse.ArgumentParser, args: argparse.Namespace, trace: Trace
) -> tuple[list, str]:
    """(the dO the options ask for, shaped like the trace's output, the words for it);
    parser.error on a bad choice."""
    kind = args.grad_output or "ones"
    if args.seed is not None and kind != "random":
        parser.error(f"--seed is read only with --grad-output random, found --grad-output {kind}")
    if args.target_cell is not None and kind != "target":
        parser.error(f"--target-cell is read only with --grad-output target, found {kind}")
    rows, cols = trace["output"].shape
    target = None
    if kind == "target":
        cell = args.target_cell or "0,0"
        try:
            i, c = (int(part) for part in cell.split(","))
            target = one_hot(rows, cols, i, c)
        except ValueError:
            parser.error(
                f"--target-cell: expected I,C inside the output's shape ({rows}, {cols}), "
                f"found {cell!r}"
            )
    seed = 0 if args.seed is None else args.seed
    words = {
        "ones": "ones (the gradient of sum(output))",
        "random": f"random in [-1, 1], two decimals, seed {seed}",
        "target": "one-hot at output[{}][{}] (the gradient of that entry)".format(
            *(args.target_cell or "0,0").split(",")
        ),
    }[kind]
    return make_grad_output(kind, rows, cols, seed=seed, target=target), words


def main(argv: Sequence[str] | None = None) -> int:
    """Run the terminal trace; returns the exit status (2 for an unknown preset)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.backward and (args.grad_output or args.seed is not None or args.target_cell):
        parser.error("--grad-output, --seed and --target-cell choose dO: they need --backward")
    if args.list:
        sys.stdout.write(format_list())
        return 0
    if args.preset not in presets.names():
        known = ", ".join(presets.names())
        print(f"python -m scratch: unknown preset {args.preset!r}; known: {known}", file=sys.stderr)
        return 2
    preset = presets.get(args.preset)
    trace, header = preset.trace(), format_header(preset)
    if args.backward:
        dO, words = _grad_output(parser, args, trace)
        trace = trace_attention(**preset.kwargs(), grad_output=dO)
        header += f"  dO: {words}\n"
    sys.stdout.write(header + "\n" + format_trace(trace, args.decimals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
