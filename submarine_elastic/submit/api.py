"""The submit side's value types and errors: what ``jobspec`` (the request) and ``jobcode`` (the packing) both
name, so that neither imports the other's types."""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path

#: The names a packed environment's archive may have.
TAR_GZ = (".tar.gz", ".tgz")
#: The bytes read at once while hashing an archive.
CHUNK = 1 << 20


class JobSpecError(ValueError):
    """A ``submarine job run`` flag is invalid; the message names it."""


class JobCodeError(JobSpecError):
    """The job's code or environment cannot be shipped; the message names the flag and the path."""


@dataclass(frozen=True)
class CodeSnapshot:
    """A job's code as packed on this machine: the archive (a temporary file until it is put on the cluster),
    its content hash, size and what it holds."""

    archive: Path
    sha256: str
    archive_bytes: int
    files: int
    content_bytes: int

    @property
    def name(self) -> str:
        """Its name in the job's directory: by content, so two jobs of the same code share a name."""
        return f"code-{self.sha256[:16]}.tar.gz"


@dataclass(frozen=True)
class PackedEnv:
    """A packed Python environment on this machine (``--python_env``) and its content hash."""

    archive: Path
    sha256: str
    archive_bytes: int

    @property
    def name(self) -> str:
        """Its name in the user's cache of environments: one upload per content."""
        return f"{self.sha256[:32]}.tar.gz"

    @classmethod
    def load(cls, path: Path) -> PackedEnv:
        """Reads the archive once: its hash, and that it is a gzip'd tar holding ``bin/python``.

        Raises:
            JobCodeError: the file is missing, not a ``.tar.gz``, not a gzip'd tar, or has no ``bin/python``
                (the path named).
        """
        flag = f"--python_env {path}"
        if not path.is_file():
            raise JobCodeError(f"{flag}: no such file")
        if not path.name.endswith(TAR_GZ):
            raise JobCodeError(f"{flag}: must be a .tar.gz (as venv-pack and conda-pack write), which YARN extracts")
        digest = hashlib.sha256()
        found = False
        with path.open("rb") as raw:
            reader = Hashing(raw, digest)
            try:
                with tarfile.open(fileobj=reader, mode="r|gz") as tar:  # type: ignore[call-overload]
                    for member in tar:
                        found = found or member.name.removeprefix("./") == "bin/python"
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise JobCodeError(f"{flag}: not a gzip'd tar ({exc})") from exc
            while reader.read(CHUNK):
                pass
        if not found:
            raise JobCodeError(f"{flag}: no bin/python in it: not a packed environment (venv-pack, conda-pack)")
        return cls(path.resolve(), digest.hexdigest(), path.stat().st_size)


class Hashing:
    """A binary reader that hashes what is read through it."""

    def __init__(self, raw: object, digest: hashlib._Hash) -> None:
        self._raw = raw
        self._digest = digest

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._raw.read(n)  # type: ignore[attr-defined]
        self._digest.update(data)
        return data


