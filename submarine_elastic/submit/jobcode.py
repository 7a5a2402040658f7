"""What a job carries to the nodes: a snapshot of its code and, optionally, a packed Python environment.

``job run`` packs the job's code (``--workdir``, by default the current directory, and every local
``--localization`` source) into one gzip'd tar, named by the hash of its content, which goes into the job's
own directory (on the cluster's HDFS, else the local jobs directory) beside its secrets. YARN localizes it into
every container as a file, which the worker agent unpacks once per container (:func:`unpack_code`) into the
container's own directory as :data:`CODE_DIR`, where the training command runs (a YARN ARCHIVE would break the
NodeManager's in-place relaunch of a failed worker: see :func:`unpack_code`). Each container gets the job's copy, so
editing or removing the source after ``job run`` changes nothing for that job, relaunched and added workers
included.

A packed environment (``--python_env``, a venv-pack or conda-pack ``.tar.gz``) is uploaded once per content
hash into the user's cache beside the jobs (:data:`ENV_CACHE`) and localized as the archive
:data:`ENV_DIR`: the driver, the agents and the training processes run its ``bin/python``.

Everything here runs before anything is sent: a missing source or a snapshot over its bound is refused
naming it, and nothing is left behind.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from submarine_elastic.files import atomic_path
from submarine_elastic.submit.api import CHUNK, CodeSnapshot, JobCodeError, JobSpecError, Localization, PackedEnv
from submarine_elastic.submit.jobspec import (
    CODE_ARCHIVE,
    CODE_DIR,
    ENV_CACHE,
    JobRequest,
    describe_code,
    describe_environment,
    job_dir,
)

#: The most bytes of files a code snapshot may hold (before compression): code, not data sets or checkpoints,
#: which a job reads from and writes to the paths its flags name.
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
#: Names never put in a snapshot: version control, caches of Python and its tools, notebooks' checkpoints.
EXCLUDED_NAMES = frozenset(
    {
        ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
        ".tox", ".nox", ".ipynb_checkpoints", ".DS_Store",
    }
)  # fmt: skip
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
#: A directory holding one of these is a Python environment (virtualenv, conda), never code: left out.
ENVIRONMENT_MARKERS = ("pyvenv.cfg", "conda-meta")
#: Suffixes YARN extracts as a gzip'd tar.
#: gzip level of a snapshot: code compresses well at any level, and level 1 is the fastest.
_GZIP_LEVEL = 1


def is_environment(directory: Path) -> bool:
    """Whether ``directory`` is a Python environment (a virtualenv's ``pyvenv.cfg``, conda's ``conda-meta``)."""
    return any((directory / marker).exists() for marker in ENVIRONMENT_MARKERS)


def excluded(name: str) -> bool:
    return name in EXCLUDED_NAMES or name.endswith(EXCLUDED_SUFFIXES)


def git_ignored(root: Path) -> frozenset[Path]:
    """What git ignores under ``root`` (its ``.gitignore`` files, ``.git/info/exclude``, the user's excludes):
    ignored directories whole, as git lists them. Empty where ``root`` is not in a git work tree or git is not
    installed: then only the built-in exclusions apply."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(root / name.decode() for name in listed.split(b"\0") if name)


def walk(root: Path, ignored: frozenset[Path] = frozenset()) -> Iterator[Path]:
    """The files, symbolic links and empty directories under ``root`` a snapshot holds, in a fixed order:
    without :data:`EXCLUDED_NAMES`, compiled Python, Python environments and the paths in ``ignored``
    (:func:`git_ignored`). Symbolic links are kept as links, never followed."""
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    if not entries:
        yield root
    for entry in entries:
        path = Path(entry.path)
        if excluded(entry.name) or path in ignored:
            continue
        if entry.is_dir(follow_symlinks=False):
            if not is_environment(path):
                yield from walk(path, ignored)
        else:
            yield path


def _members(workdir: Path, localizations: list[Localization]) -> list[tuple[Path, PurePosixPath, bool]]:
    """(path here, name in the archive, read-only) of everything a snapshot holds."""
    ignored = git_ignored(workdir)
    members = [
        (p, PurePosixPath(p.relative_to(workdir).as_posix()), False) for p in walk(workdir, ignored) if p != workdir
    ]
    for loc in localizations:
        if loc.src.is_dir() and not loc.src.is_symlink():
            members += [
                (p, loc.dest / p.relative_to(loc.src).as_posix(), loc.read_only) for p in walk(loc.src) if p != loc.src
            ]
        else:
            members.append((loc.src, loc.dest, loc.read_only))
    return members


def _size(path: Path) -> int:
    st = path.lstat()
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def snapshot(workdir: Path, localizations: list[Localization], into: Path, *, limit: int | None = None) -> CodeSnapshot:
    """Packs ``workdir`` and the ``localizations`` into a gzip'd tar in directory ``into``. The bound is
    checked on the files' sizes before anything is written; the archive's bytes depend on the content only
    (names, modes, bytes; no times or owners), so the same code has the same hash.

    Raises:
        JobCodeError: ``workdir`` is not a directory, or the snapshot would hold more than ``limit`` bytes
            (default :data:`MAX_SNAPSHOT_BYTES`; naming the source and its largest files); nothing is left in
            ``into``.
    """
    if not workdir.is_dir():
        raise JobCodeError(f"--workdir {workdir}: no such directory (the job's code is snapshotted from it)")
    limit = MAX_SNAPSHOT_BYTES if limit is None else limit
    members = _members(workdir, localizations)
    sizes = {path: _size(path) for path, _, _ in members}
    total = sum(sizes.values())
    if total > limit:
        largest = sorted(sizes, key=lambda p: -sizes[p])[:3]
        shown = ", ".join(f"{p} ({sizes[p] / 2**20:.1f} MiB)" for p in largest)
        sources = " and ".join([f"--workdir {workdir}", *(f"--localization {loc.src}" for loc in localizations)])
        raise JobCodeError(
            f"the job's code snapshot of {sources} holds {total / 2**20:.1f} MiB, over its bound of "
            f"{limit / 2**20:.0f} MiB; largest: {shown}. Keep data and checkpoints out of the code (the job reads "
            "and writes them at the paths its flags name), or run from a smaller --workdir"
        )
    fd, name = tempfile.mkstemp(prefix="code-", suffix=".tar.gz", dir=into)
    path = Path(name)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "w+b") as out:
            with (
                gzip.GzipFile(fileobj=out, mode="wb", compresslevel=_GZIP_LEVEL, mtime=0, filename="") as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for source, arcname, read_only in members:
                    _add(tar, source, arcname.as_posix(), read_only)
            out.seek(0)
            while chunk := out.read(CHUNK):
                digest.update(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return CodeSnapshot(path, digest.hexdigest(), path.stat().st_size, len(members), total)


def _add(tar: tarfile.TarFile, source: Path, arcname: str, read_only: bool) -> None:
    info = tar.gettarinfo(str(source), arcname)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode &= ~0o222 if read_only else ~0
    if info.isreg():
        with source.open("rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)


def cache_env(env: PackedEnv, cache: Path) -> Path:
    """Copies ``env`` into the local cache directory ``cache`` unless a copy of its content is there (a
    cluster without HDFS, whose NodeManagers read this machine's files). Returns the copy.

    Raises:
        OSError: the copy failed (nothing partial is left).
    """
    cache.mkdir(parents=True, exist_ok=True)
    kept = cache / env.name
    if kept.is_file() and kept.stat().st_size == env.archive_bytes:
        return kept
    with atomic_path(kept) as tmp:
        shutil.copyfile(env.archive, tmp)
    return kept


#: In the job's local directory: what ``job show`` says of the job's code and environment.
CARRIED_FILE = "carried.json"


def keep_locally(req: JobRequest) -> None:
    """Puts the job's snapshot into its local directory and its packed environment into the local cache of
    environments, for a cluster without HDFS whose NodeManagers read this machine's files (after
    ``jobspec.write_secrets`` made the directory).

    Raises:
        OSError: a copy failed.
    """
    directory = job_dir(req.name)
    if req.code is not None:
        shutil.copyfile(req.code.archive, directory / req.code.name)
    if req.python_env is not None:
        cache_env(req.python_env, directory.parent / ENV_CACHE)


def write_carried(req: JobRequest) -> None:
    """Records in the job's local directory where its code and its Python come from, for ``job show``."""
    record = {"code": describe_code(req), "python": describe_environment(req)}
    path = job_dir(req.name) / CARRIED_FILE
    path.write_text(json.dumps(record) + "\n")
    path.chmod(0o600)  # as the job's other files: the directory is the user's alone


def read_carried(job: str) -> dict[str, str]:
    """What :func:`write_carried` recorded of ``job`` (empty when nothing, or it cannot be read)."""
    try:
        record = json.loads((job_dir(job) / CARRIED_FILE).read_text())
    except (OSError, ValueError, JobSpecError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {k: v for k, v in record.items() if isinstance(k, str) and isinstance(v, str)}


#: The packers of ``job pack-env``: the tool (its PyPI name) and its module, by the kind of environment.
PACKERS = {"conda": ("conda-pack", "conda_pack"), "venv": ("venv-pack", "venv_pack")}


def pack_current_env(output: Path, *, force: bool = False) -> tuple[PackedEnv, list[str]]:
    """Packs the environment this Python runs in into ``output`` (a conda environment with conda-pack, a
    virtualenv with venv-pack), for ``--python_env``. Blocks while the packer compresses the environment
    (a TensorFlow environment: about a minute).

    Returns:
        The packed environment and the distributions installed editable, whose code stays on this machine
        (the job must carry it in its snapshot, or they be installed normally before packing).

    Raises:
        JobCodeError: this Python is not in a virtualenv or conda environment, its packer is not installed
            (naming how to install it), or the packer failed.
    """
    import importlib
    import sys

    prefix = Path(sys.prefix)
    if (prefix / "conda-meta").is_dir():
        tool, module = PACKERS["conda"]
    elif sys.prefix != sys.base_prefix:
        tool, module = PACKERS["venv"]
    else:
        raise JobCodeError(
            f"{prefix} is neither a virtualenv nor a conda environment: pack-env packs the environment it runs in"
        )
    try:
        packer = importlib.import_module(module)
    except ImportError as exc:
        raise JobCodeError(
            f"{tool} is not installed in {prefix}: `{prefix}/bin/pip install {tool}` (or the extra "
            f"submarine-elastic[pack]) packs this environment"
        ) from exc
    try:
        packer.pack(prefix=str(prefix), output=str(output), force=force)
    except Exception as exc:  # each packer raises its own exception type for what it cannot pack
        raise JobCodeError(f"{tool} could not pack {prefix}: {exc}") from exc
    return PackedEnv.load(output), editable_installs()


def editable_installs() -> list[str]:
    """The distributions of this environment installed editable (``pip install -e``): a packed environment
    holds only a link to their code on this machine."""
    from importlib import metadata

    found = []
    for dist in metadata.distributions():
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if isinstance(direct, dict) and direct.get("dir_info", {}).get("editable"):
            found.append(str(dist.metadata["Name"]))
    return sorted(found)


def unpack_code(container_dir: Path) -> Path | None:
    """Unpacks the localized snapshot (:data:`CODE_ARCHIVE`) into :data:`CODE_DIR` of ``container_dir``, once:
    a worker the NodeManager relaunches in its container finds it unpacked. Returns the directory (None: the job
    carries no snapshot).

    YARN's ARCHIVE resources are links to a directory, and the NodeManager's in-place relaunch links each
    resource again with ``ln -sf``, which puts the new link inside that directory: a loop, on which the launch
    script's own ``find -L`` fails, so every relaunch attempt failed. The snapshot is localized as a file instead.

    Raises:
        tarfile.TarError: the archive is damaged (or holds a path outside the directory).
    """
    archive = container_dir / CODE_ARCHIVE
    target = container_dir / CODE_DIR
    if target.is_dir():
        return target
    if not archive.exists():
        return None
    partial = container_dir / f".{CODE_DIR}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(partial, filter="tar")  # keeps the modes (read-only localizations), refuses escapes
    partial.rename(target)
    return target
