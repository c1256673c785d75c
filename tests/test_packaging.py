"""pyproject.toml uses the current packaging metadata (no deprecation warnings on install)."""

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    data = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    # a table ({ text = "MIT" }) is deprecated since setuptools 77 and warns on every install
    assert data["project"]["license"] == "MIT"
    assert "setuptools>=77" in data["build-system"]["requires"]
