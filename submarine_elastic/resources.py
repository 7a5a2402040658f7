"""Files the package ships beside its code, found through ``importlib.resources``.

A wheel and a checkout find them the same way: nothing here walks up from ``__file__`` to a
repository. The package must be installed as files on disk (a wheel or an editable install, not a
zip), because the Hadoop daemons, the YARN client and ``javac`` read these files by path.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


class MissingResourceError(FileNotFoundError):
    """A file the package ships is not where the installed package should hold it."""


def _path(package: str, relative: str) -> Path:
    path = Path(str(files(package).joinpath(relative)))
    if not path.exists():
        raise MissingResourceError(
            f"{package}: {relative} is missing from the installed package ({path}); reinstall submarine-elastic"
        )
    return path


def job_template() -> Path:
    """The YARN service spec every elastic job starts from (``yarn_service_specs/elastic-job.json``)."""
    return _path("yarn_service_specs", "elastic-job.json")


def hadoop_conf() -> Path:
    """The Hadoop and ZooKeeper configuration shared by the local and the docker-compose cluster."""
    return _path("submarine_elastic", "cluster/hadoop/conf")


def gpu_fixture() -> Path:
    """``nvidia-smi -x -q`` as a real NVIDIA H200 printed it (driver 580), which the pseudo-cluster's stand-in
    ``nvidia-smi`` copies."""
    return _path("submarine_elastic", "cluster/hadoop/gpu/nvidia-smi-h200.xml")


def hadoop_pom() -> Path:
    """The Maven project that lists the pseudo-cluster's jars (``submarine cluster install-jars``)."""
    return _path("submarine_elastic", "cluster/hadoop/pom.xml")


def pollux_data() -> Path:
    """The measured job models and workloads the simulator replays (Apache-2.0, ``LICENSE`` inside)."""
    return _path("submarine_elastic", "sim/data/pollux")
