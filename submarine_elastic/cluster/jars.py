"""The pseudo-cluster's jars: resolved by Maven from the project the package ships (``hadoop/pom.xml``), and
packed into the one archive every service's ApplicationMaster localizes (``yarn.service.framework.path``)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

from submarine_elastic import env, resources
from submarine_elastic.cluster.api import ClusterError, Progress
from submarine_elastic.files import atomic_path

STAMP = ".stamp"


def pom_digest() -> str:
    return hashlib.sha256(resources.hadoop_pom().read_bytes()).hexdigest()[:16]


def jars_current(dest: Path) -> bool:
    """True when ``dest`` holds the jars of the shipped Maven project (its digest in ``.stamp``)."""
    stamp = dest / STAMP
    return stamp.is_file() and stamp.read_text().strip() == pom_digest() and any(dest.glob("*.jar"))


def install_jars(dest: Path | None = None, *, progress: Progress = lambda _: None) -> Path:
    """Resolves the Hadoop YARN and ZooKeeper jars into ``dest`` (default ``SUBMARINE_HADOOP_LIB``) unless they
    are there already. Blocks while Maven downloads (minutes on a fresh machine, seconds from its cache).

    The jars land in a sibling directory first and replace ``dest`` whole, so an interrupted run never
    leaves a half-filled classpath.

    Raises:
        ClusterError: Maven is missing or failed (its last output lines in the message).
    """
    dest = (dest or env.settings().hadoop_lib_directory()).expanduser()
    if jars_current(dest):
        progress(f"the Hadoop jars in {dest} are current")
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError(
            "Maven is required to resolve the Hadoop jars (no 'mvn' on PATH); on Debian: apt-get install maven"
        )
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    progress(f"resolving the Hadoop YARN and ZooKeeper jars from Maven Central into {dest} (minutes when uncached)")
    command = [
        mvn, "--batch-mode", "--no-transfer-progress", "-f", str(resources.hadoop_pom()),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ClusterError(f"mvn could not resolve the Hadoop jars (exit {done.returncode}):\n{tail}")
    (staging / STAMP).write_text(pom_digest() + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    progress(f"{sum(1 for _ in dest.glob('*.jar'))} jars in {dest}")
    return dest


def am_archive(lib: Path) -> tuple[Path, list[Path]]:
    """Where the ApplicationMaster's jar archive of the jars in ``lib`` is (beside ``lib``), and the jars to
    pack into it ([] while it is newer than every jar)."""
    tarball = lib.parent / "service-dep.tar.gz"
    jars = sorted(lib.glob("*.jar"))
    newest = max(j.stat().st_mtime for j in jars)
    if tarball.is_file() and tarball.stat().st_mtime >= newest:
        return tarball, []
    return tarball, jars


def pack_am_archive(lib: Path, say: Progress) -> Path:
    """The service AM's jars as one archive (:func:`am_archive`), packed when stale: without it the RM uploads
    every jar separately for each service it starts. Blocks while it packs (seconds).

    Raises:
        OSError: the archive cannot be written (the old one, if any, is left as it was).
    """
    tarball, jars = am_archive(lib)
    if not jars:
        return tarball
    say(f"packing {len(jars)} jars for the service ApplicationMaster into {tarball}")
    with atomic_path(tarball) as tmp, tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
        for jar in jars:
            tar.add(jar, arcname=jar.name)
    return tarball
