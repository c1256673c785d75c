"""A seeded sample is the same text through the three doors: Model.generate, `python -m
scratch.models --generate` and the window's Generate button (all repeat Decoding.extend, new
token n drawn with a generator seeded (seed, n)). On a tiny random Llama GGUF file."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from scratch import models  # noqa: E402
from scratch.models.__main__ import main  # noqa: E402
from tests.test_models_gguf import metadata, weights, write  # noqa: E402

PROMPT = "ab ab"
NEW = 8  # 2 prompt tokens + 8 new within the tiny model's 16 positions
TEMPERATURE = 2.0  # flat enough that 6 tokens all get drawn
SEEDS = (0, 1, 7)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write(tmp_path_factory.mktemp("seeded") / "tiny.gguf", metadata(), weights(3))


@pytest.fixture(scope="module")
def api(tiny):
    """{seed: Model.generate's new ids}."""
    model = models.load(tiny)
    return {seed: model.generate(PROMPT, NEW, TEMPERATURE, seed).ids for seed in SEEDS}


def cli(path, capsys, *flags: str) -> list[int]:
    """The new ids `python -m scratch.models PATH PROMPT --generate NEW ...` prints."""
    assert main([str(path), PROMPT, "--generate", str(NEW), *flags]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("ids "))
    return [int(i) for i in line.split()[1:]]


def test_seeds_give_different_text_and_a_seed_repeats(tiny, api):
    assert all(len(ids) == NEW for ids in api.values())
    assert len({tuple(ids) for ids in api.values()}) > 1, f"three seeds drew one text: {api}"
    model = models.load(tiny)
    assert model.generate(PROMPT, NEW, TEMPERATURE, SEEDS[0]).ids == api[SEEDS[0]]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_command_line_generates_the_api_text(tiny, api, capsys, seed):
    assert cli(tiny, capsys, "--temperature", str(TEMPERATURE), "--seed", str(seed)) == api[seed]


def test_the_command_line_greedy_is_the_api_greedy(tiny, capsys):
    assert cli(tiny, capsys) == models.load(tiny).generate(PROMPT, NEW).ids


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--temperature", "1"], "--temperature and --seed: read only with --generate N"),
        (["--seed", "3"], "--temperature and --seed: read only with --generate N"),
    ],
)
def test_sampling_flags_without_generate_are_refused(tiny, capsys, flags, words):
    with pytest.raises(SystemExit) as exit_:
        main([str(tiny), PROMPT, *flags])
    assert exit_.value.code == 2 and words in capsys.readouterr().err


def test_a_bad_generate_count_is_an_error_naming_it(tiny, capsys):
    assert main([str(tiny), PROMPT, "--generate", "0"]) == 2
    assert "max_new_tokens: expected a whole number >= 1" in capsys.readouterr().err


@pytest.mark.gui
def test_the_window_generate_button_draws_the_api_text(qtbot, tiny, api):
    pytest.importorskip("PyQt6")
    pytest.importorskip("pyqtgraph")
    from gui.views.model_panel import ModelPanel

    panel = ModelPanel()
    qtbot.addWidget(panel)
    panel.model_path.setText(str(tiny))
    panel.text.setText(PROMPT)
    with qtbot.waitSignal(panel.worker.finished, timeout=60000):
        panel.run_button.click()
    prompt = panel.frame
    bar = panel.generate_bar
    bar.temperature.setValue(TEMPERATURE)
    try:
        for seed in SEEDS:
            panel.show_result(prompt)  # back to the prompt alone: a new generation
            bar.seed.setValue(seed)
            for _ in range(NEW):
                with qtbot.waitSignal(panel.worker.finished, timeout=60000):
                    bar.button.click()
            assert list(panel.frame.decoding.ids) == api[seed], f"seed {seed}"
    finally:
        panel.wait()
