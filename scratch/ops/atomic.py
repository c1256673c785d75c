"""Atomic file writes: a temporary file in the same folder, flush + fsync, then os.replace.

A symbolic link is followed: its target is replaced and the link stays a link.
"""

from __future__ import annotations

import os
import tempfile


def _mode_for(path: str) -> int:
    """The existing file's permissions, else what open() would give under the umask."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    # step 1: through a symlink, replace the file it points to (os.replace on the link path
    # would swap the link itself for a regular file and leave its target stale)
    path = os.path.realpath(os.fspath(path))
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):  # else mkstemp names its own .part file in the error
        raise FileNotFoundError(f"{path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; expected a file name")
    # step 2: the temporary file lives beside the target, so os.replace never crosses devices
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".part", dir=folder)
    try:
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; keep the usual permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            # step 3: push the bytes to disk before the rename makes them visible
            handle.flush()
            os.fsync(handle.fileno())
        # step 4: the rename is atomic on POSIX and Windows
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` atomically."""
    write_bytes(path, text.encode("utf-8"))


__all__ = ["write_bytes", "write_text"]
