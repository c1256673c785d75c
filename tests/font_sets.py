"""Font sets for the window's tests: a fontconfig file that offers one family's fonts only.

SCRATCH_TEST_FONTS=dejavu|noto|liberation (read by conftest.py before Qt starts) runs the tests
with only that family's Sans and Sans Mono files: a window that fits with one font set and not
with another shows up on any host that has the files, whatever its own default fonts are.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
from pathlib import Path

ENV = "SCRATCH_TEST_FONTS"

# family name (sans, mono) and the file name patterns of each set's upright and bold faces
FONT_SETS = {
    "dejavu": (
        ("DejaVu Sans", "DejaVu Sans Mono"),
        (
            "DejaVuSans.ttf",
            "DejaVuSans-Bold.ttf",
            "DejaVuSans-Oblique.ttf",
            "DejaVuSansMono.ttf",
            "DejaVuSansMono-Bold.ttf",
        ),
    ),
    "noto": (
        ("Noto Sans", "Noto Sans Mono"),
        (
            "NotoSans-Regular.ttf",
            "NotoSans-Bold.ttf",
            "NotoSans-Italic.ttf",
            "NotoSansMono-Regular.ttf",
            "NotoSansMono-Bold.ttf",
        ),
    ),
    "liberation": (
        ("Liberation Sans", "Liberation Mono"),
        (
            "LiberationSans-Regular.ttf",
            "LiberationSans-Bold.ttf",
            "LiberationSans-Italic.ttf",
            "LiberationMono-Regular.ttf",
            "LiberationMono-Bold.ttf",
        ),
    ),
}
FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "~/.local/share/fonts", "~/.fonts")
# the files each set needs at least: its Sans and its Mono, upright
REQUIRED = {name: (files[0], files[3]) for name, (_, files) in FONT_SETS.items()}


def find_files(name: str) -> dict[str, str]:
    """The font files of set `name` found on this host: file name -> path."""
    if name not in FONT_SETS:
        raise ValueError(f"{ENV}: font set must be one of {sorted(FONT_SETS)}, got {name!r}")
    found: dict[str, str] = {}
    for root in FONT_DIRS:
        for file in FONT_SETS[name][1]:
            for path in glob.glob(
                os.path.join(os.path.expanduser(root), "**", file), recursive=True
            ):
                found.setdefault(file, path)
    return found


def missing(name: str) -> list[str]:
    """The files set `name` needs that this host lacks (empty: the set can be used)."""
    found = find_files(name)
    return [file for file in REQUIRED[name] if file not in found]


def write_config(name: str, folder: Path) -> Path:
    """Write `folder/fonts.conf`: this host's own fontconfig set-up (its rendering settings and
    aliases), offering only set `name`'s families, with sans-serif, serif, monospace and Qt's
    "Sans Serif" bound to them; returns the file's path."""
    sans, mono = FONT_SETS[name][0]
    host = os.environ.get("FONTCONFIG_FILE", "/etc/fonts/fonts.conf")
    accept = "".join(
        f"<pattern><patelt name='family'><string>{family}</string></patelt></pattern>"
        for family in (sans, mono)
    )
    aliases = "".join(
        f"<alias binding='strong'><family>{generic}</family><prefer><family>{family}</family>"
        "</prefer></alias>"
        for generic, family in (
            ("sans-serif", sans),
            ("Sans Serif", sans),
            ("sans", sans),
            ("serif", sans),
            ("monospace", mono),
            ("Monospace", mono),
            ("mono", mono),
        )
    )
    config = folder / "fonts.conf"
    folder.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "<?xml version='1.0'?>\n<!DOCTYPE fontconfig SYSTEM 'fonts.dtd'>\n<fontconfig>"
        f"<include ignore_missing='yes'>{host}</include>"
        f"<selectfont><rejectfont><pattern/></rejectfont><acceptfont>{accept}</acceptfont>"
        f"</selectfont>{aliases}</fontconfig>\n"
    )
    return config


def activate(name: str) -> str | None:
    """Offer only set `name` to this process and its children (FONTCONFIG_FILE, before Qt
    starts); '' keeps the host's fonts. Returns why the set cannot run here, or None."""
    if not name:
        return None
    if name not in FONT_SETS:
        raise ValueError(f"{ENV}: font set must be one of {sorted(FONT_SETS)}, got {name!r}")
    lacking = missing(name)
    if lacking:
        return f"{ENV}={name}: this host lacks {', '.join(lacking)}"
    done = os.environ.get(ENV + "_FILE")  # set up by a parent process (a test's subprocess)
    if done is None or done != os.environ.get("FONTCONFIG_FILE"):
        folder = Path(tempfile.mkdtemp(prefix=f"scratch-fonts-{name}-"))
        atexit.register(shutil.rmtree, folder, True)
        os.environ["FONTCONFIG_FILE"] = os.environ[ENV + "_FILE"] = str(write_config(name, folder))
    return None
