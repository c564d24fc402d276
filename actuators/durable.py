"""Replacing a small file so that a crash leaves the old contents or the new ones, never a part of either.

Shared by the file router backend (`backends/file.py`) and the actuator's file state store (`state_store.py`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_durably(path: Path, text: str, *, mode: int | None = None, suffix: str = "") -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`, then fsync the directory
    (so that the rename itself survives a power cut).

    `mode` sets the new file's permission bits (None keeps the temporary file's 0600); `suffix` ends the temporary
    file's name.  Raises OSError; the temporary file is removed whenever the rename did not happen.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    renamed = False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
        renamed = True
    finally:
        if not renamed:
            Path(tmp).unlink(missing_ok=True)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
