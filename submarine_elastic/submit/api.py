"""The submit side's value types and errors: what ``jobspec`` (the request) and ``jobcode`` (the packing) both
name, so that neither imports the other's types."""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


@dataclass(frozen=True)
class Localization:
    """One ``--localization SRC:DEST[:ro|rw]`` entry, with Hadoop Submarine's meaning: ``SRC`` (a file or a
    directory on this machine) appears at ``DEST`` in every container; a relative ``DEST`` is under the
    directory the command runs in. ``ro`` makes its files read-only there (``rw``, the default, does not).

    Submarine also took remote sources (``hdfs://...``) and absolute destinations (Docker mounts); here a
    source is always local (it goes into the snapshot) and a destination always relative."""

    src: Path
    dest: PurePosixPath
    read_only: bool = False

    @classmethod
    def parse(cls, text: str, base: Path) -> Localization:
        """``SRC:DEST[:ro|rw]``; a relative ``SRC`` is taken from ``base``.

        Raises:
            JobCodeError: not of that form, a remote or missing source, a destination that is absolute or
                leaves the command's directory (the entry named).
        """
        flag = f"--localization {text!r}"
        parts = text.split(":")
        if "://" in text or (len(parts) > 1 and parts[1].startswith("//")):
            raise JobCodeError(
                f"{flag}: a remote source is not supported; give a local file or directory (it goes into the "
                "job's code snapshot), or read remote data from the job itself"
            )
        mode = "rw"
        if len(parts) == 3:
            *parts, mode = parts
        if len(parts) != 2 or not parts[0] or not parts[1] or mode not in ("ro", "rw"):
            raise JobCodeError(f"{flag}: expected SRC:DEST or SRC:DEST:ro|rw")
        dest = PurePosixPath(parts[1])
        if dest.is_absolute():
            raise JobCodeError(
                f"{flag}: DEST must be relative to the directory the command runs in (an absolute DEST is a "
                "Docker mount, not supported)"
            )
        if ".." in dest.parts or dest == PurePosixPath("."):
            raise JobCodeError(f"{flag}: DEST must name a path inside the directory the command runs in")
        src = (base / parts[0]).resolve()
        if not src.exists():
            raise JobCodeError(f"{flag}: the source {src} does not exist")
        return cls(src, dest, read_only=mode == "ro")
