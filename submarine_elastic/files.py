"""Writing a file so that a reader sees the whole old file or the whole new one, never a part.

Every file the project rewrites in place (a driver's state, a job's outcome, a certificate, a cluster's state, a
packed archive) goes through :func:`write_atomic` or, when a library writes the file itself (``tarfile``,
``shutil.copyfile``), through :func:`atomic_path`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def _temp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; on a clean exit it replaces ``path`` (one ``rename``), on an
    exception it is removed and ``path`` is left as it was.

    Raises:
        OSError: the rename (or whatever the body raised).
    """
    tmp = _temp_of(path)
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Writes ``data`` (a ``str`` as UTF-8) to ``path`` atomically.

    Args:
        mode: the new file's permissions, applied when it is created (never wider, even for a moment); ``None``
            for the process's default (``0o666`` less the umask).

    Raises:
        OSError: the directory cannot be written.
    """
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
