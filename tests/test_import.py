"""`import scratch` needs nothing beyond the standard library."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {"numpy", "torch", "PyQt6", "pyqtgraph", "scipy"}:
            raise ImportError("blocked for this test: " + name)
sys.meta_path.insert(0, Block())
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_import_scratch_without_numpy_torch_qt():
    done = run(
        "import scratch, scratch.learn.presets, scratch.backends\n"
        "print(scratch.scaled_dot_product_attention([[1.0]], [[1.0]], [[2.0]])[0])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[2.0]]"


def test_blocker_really_blocks():
    """The blocker itself works: importing numpy under it fails."""
    done = run("import numpy")
    assert done.returncode != 0
    assert "blocked for this test" in done.stderr


def test_backends_listing_without_numpy_torch():
    done = run("import scratch.backends as b; print(b.available())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['scratch']"


def test_subpackages_are_attributes_after_a_plain_import():
    # exactly as the README says: no `import scratch.learn.presets` needed for scratch.presets
    done = run(
        "import scratch, sys\n"
        "print(len(scratch.presets.names()) > 0, scratch.backends.available())\n"
        "print('presets' in dir(scratch), 'numpy' in sys.modules, 'torch' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "['scratch']", "True", "False", "False"]


def test_an_unknown_attribute_is_an_attribute_error():
    import pytest

    import scratch

    with pytest.raises(AttributeError, match="module 'scratch' has no attribute 'nope'"):
        scratch.nope  # noqa: B018
    assert not hasattr(scratch, "models_that_do_not_exist")
