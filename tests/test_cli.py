"""`python -m scratch`: the terminal trace of a preset, the preset list, and bad names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import scratch
from scratch.__main__ import attends_most, format_matrix, format_trace, main
from scratch.learn import presets
from scratch.trace.steps import call_of, spec_for

ROOT = Path(__file__).resolve().parent.parent

# Seed 003 In[14]/In[41]: the weights row of 'journey' as the notebook printed it.
JOURNEY_ROW = ["0.1385", "0.2379", "0.2333", "0.1240", "0.1082", "0.1581"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run `python -m scratch ARGS` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "scratch", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def block(text: str, step: str) -> list[str]:
    """Lines of one step's block in a printed trace (from its header to the blank line)."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("step ")]
    start = next(i for i in heads if lines[i].split()[2] == step)  # "step 5: weights  (..."
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_list_names_every_preset_with_its_title():
    done = run_cli("--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(presets.names())
    for line, name in zip(lines, presets.names(), strict=True):
        assert line.split()[0] == name
        assert line.endswith(presets.get(name).title)


def test_journey_prints_the_notebook_weights_row_and_who_attends():
    done = run_cli("journey")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    weights = block(done.stdout, "weights")
    assert weights[1].strip() == "weights = softmax(masked) along each row"
    assert weights[3].split() == ["Your", "journey", "starts", "with", "one", "step", "|", "sum"]
    row = next(line.split() for line in weights if line.split()[0] == "journey")
    assert row == ["journey", *JOURNEY_ROW, "|", "1.0000"]
    assert done.stdout.splitlines()[-5] == "  'journey' attends most to 'journey' (0.2379)"


def test_unknown_preset_exits_2_naming_the_known_ones():
    done = run_cli("no-such-preset")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "unknown preset 'no-such-preset'" in done.stderr
    for name in presets.names():
        assert name in done.stderr


def test_default_preset_is_journey(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(presets.get("journey").title + "\n")
    assert "'journey' attends most to 'journey' (0.2379)" in out


def test_every_preset_prints_every_step(capsys):
    for name in presets.names():
        assert main([name]) == 0
        out = capsys.readouterr().out
        trace = presets.get(name).trace()
        names = trace.names()
        for k, step in enumerate(trace, 1):  # the registry's number, then its place k/N
            n = spec_for(call_of(trace), step.name).number
            head = f"step {n}: {step.name} ({k}/{len(names)})  ("
            assert head in out, f"{name}: step {step.name}"


def test_decimals_option_widens_the_numbers(capsys):
    assert main(["journey", "--decimals", "6"]) == 0
    row = next(
        line.split()
        for line in block(capsys.readouterr().out, "weights")
        if line.split()[0] == "journey"
    )
    # softmax of seed 003's scores row 1, to 6 decimals (independently: NumPy float64)
    assert row[1:7] == ["0.138548", "0.237891", "0.233274", "0.123992", "0.108182", "0.158114"]


def test_exact_ties_name_every_key(capsys):
    # seed 001: query v_1 scores [2, 4, 4], so keys v_2 and v_3 get identical weights
    assert main(["seed001-example3"]) == 0
    assert "'v_1' attends most to 'v_2' and 'v_3' (0.4683 each)" in capsys.readouterr().out


def test_matrix_columns_line_up():
    text = format_matrix([[1.0, -22.5], [0.25, 3.0]], ["a", "bb"], ["c0", "c1"], 2)
    lines = text.splitlines()
    assert lines == ["        c0      c1", "  a   1.00  -22.50", "  bb  0.25    3.00"]


def test_negative_zero_and_inf_are_spelled_plainly():
    text = format_matrix([[-0.00001, float("-inf")]], ["q"], ["k0", "k1"], 3)
    assert text.splitlines()[1].split() == ["q", "0.000", "-inf"]


def test_masked_heads_and_fully_masked_rows():
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    eye = [[1.0, 0.0], [0.0, 1.0]]
    mask = [[True, True, False], [False, False, False], [True, True, True]]
    t = scratch.trace_attention(
        x, w_q=eye, w_k=eye, w_v=eye, num_heads=2, attn_mask=mask, tokens=["a", "b", "c"]
    )
    text = format_trace(t)
    assert "  head 0:" in text and "  head 1:" in text
    masked = block(text, "masked")
    assert any(line.split()[:4] == ["b", "-inf", "-inf", "-inf"] for line in masked)
    sentences = attends_most(t)
    assert len(sentences) == 6  # 2 heads x 3 queries
    assert "head 0: 'b' attends to no key (every key is masked)" in sentences
    assert "head 1: 'b' attends to no key (every key is masked)" in sentences


@pytest.mark.parametrize("bad", [["--decimals", "20"], ["--bogus"]])
def test_bad_options_exit_2(bad, capsys):
    with pytest.raises(SystemExit, match="2") as exc:
        main(bad)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


# -- --backward: the gradients after the forward steps ----------------------------------------


def numbers(lines: list[str]) -> list[list[float]]:
    """The numbers of a printed matrix block (the lines after header, formula, note, columns)."""
    return [[float(v) for v in line.split()[1:]] for line in lines[4:]]


def test_backward_prints_every_gradient_after_who_attends_to_whom(capsys):
    assert main(["journey", "--backward"]) == 0
    out = capsys.readouterr().out
    trace = presets.get("journey").trace()
    L, d = trace["output"].shape
    backward = scratch.trace_attention(
        **presets.get("journey").kwargs(), grad_output=[[1.0] * d] * L
    )
    names = backward.names()
    heads = [line.split()[2] for line in out.splitlines() if line.startswith("step ")]
    assert heads == names
    first = "step 9: grad_output"
    assert out.index("who attends to whom") < out.index(first)
    assert numbers(block(out, "grad_output")) == [[1.0] * d] * L
    for step in ("grad_value", "grad_scores", "grad_query", "grad_key"):
        want = [round(x, 4) for row in backward[step].value for x in row]
        got = [x for row in numbers(block(out, step)) for x in row]
        assert got == pytest.approx(want, abs=1e-12), step
    row_dot = block(out, "row_dot")
    assert row_dot[4].split()[1:] == [f"{x:.4f}" for x in backward["row_dot"].value]


def test_backward_grad_output_choices(capsys):
    assert main(["journey", "--backward", "--grad-output", "random", "--seed", "3"]) == 0
    first = block(capsys.readouterr().out, "grad_output")
    assert main(["journey", "--backward", "--grad-output", "random", "--seed", "3"]) == 0
    assert block(capsys.readouterr().out, "grad_output") == first
    assert main(["journey", "--backward", "--grad-output", "random", "--seed", "4"]) == 0
    assert block(capsys.readouterr().out, "grad_output") != first
    assert len({v for row in numbers(first) for v in row}) > 3
    assert main(["journey", "--backward", "--grad-output", "target", "--target-cell", "2,1"]) == 0
    target = numbers(block(capsys.readouterr().out, "grad_output"))
    assert [(i, c) for i, row in enumerate(target) for c, v in enumerate(row) if v] == [(2, 1)]
    assert sum(v for row in target for v in row) == 1.0


@pytest.mark.parametrize(
    "bad, match",
    [
        (["--grad-output", "ones"], "need --backward"),
        (["--seed", "2"], "need --backward"),
        (["--backward", "--seed", "2"], "--seed is read only with --grad-output random"),
        (["--backward", "--grad-output", "ones", "--target-cell", "0,0"], "--target-cell is read"),
        (
            ["--backward", "--grad-output", "target", "--target-cell", "9,0"],
            "--target-cell: expected I,C",
        ),
        (
            ["--backward", "--grad-output", "target", "--target-cell", "a"],
            "--target-cell: expected I,C",
        ),
        (["--backward", "--grad-output", "zeros"], "invalid choice: 'zeros'"),
    ],
)
def test_backward_bad_choices_exit_2_with_a_clear_message(bad, match, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["journey", *bad])
    assert stop.value.code == 2
    assert match in capsys.readouterr().err


def test_backward_from_the_terminal():
    done = run_cli("seed004", "--backward", "--decimals", "3")
    assert done.returncode == 0, done.stderr
    assert "grad_scores = weights * (grad_weights - row_dot)" in done.stdout
    assert "step 16: grad_x (23/23)  (4 x 3: query x model)" in done.stdout
    assert "  dO: ones (the gradient of sum(output))\n" in done.stdout


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--grad-output", "random", "--seed", "3"], "dO: random in [-1, 1], two decimals, seed 3"),
        (["--grad-output", "target", "--target-cell", "2,1"], "dO: one-hot at output[2][1]"),
    ],
)
def test_the_header_says_which_dO(capsys, options, words):
    assert main(["journey", "--backward", *options]) == 0
    assert words in capsys.readouterr().out
