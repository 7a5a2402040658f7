"""One daemon of a cluster run in the foreground, on a machine or in a container of its own
(``submarine cluster daemon``, the docker-compose cluster): what it takes, as a
:class:`~submarine_elastic.cluster.api.DaemonPlan`, and preparing that on disk. The daemons are reached by the
host names of a :class:`~submarine_elastic.cluster.api.Placement` and listen on every interface.
"""

from __future__ import annotations

import logging
from pathlib import Path

from submarine_elastic.cluster.api import ROLES, ClusterSpec, DaemonPlan, Placement
from submarine_elastic.cluster.hadoop_conf import HadoopConf, write_files
from submarine_elastic.cluster.hdfs import namenode_image
from submarine_elastic.cluster.jars import am_archive, pack_am_archive
from submarine_elastic.cluster.jvm import JvmCommands

log = logging.getLogger(__name__)


def check_role(role: str, spec: ClusterSpec, node: int) -> None:
    """Refuses a daemon ``spec`` has not.

    Raises:
        ValueError: ``role`` is not one of ``ROLES``, ``node`` is not below ``spec.nodes``, or an HDFS role of
            a spec without HDFS.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if role in ("namenode", "datanode") and not spec.hdfs:
        raise ValueError(f"a {role} is part of HDFS: the cluster's spec must have hdfs")
    if not 0 <= node < spec.nodes:
        raise ValueError(f"node must be in [0, {spec.nodes}), got {node}")


def plan_daemon(
    conf: HadoopConf, jvm: JvmCommands, java: str, role: str, spec: ClusterSpec, placement: Placement, node: int
) -> DaemonPlan:
    """What running daemon ``role`` (checked by :func:`check_role`) takes: its command line and environment,
    and the configuration files, directories and ApplicationMaster archive to prepare first. ``node``
    numbers a NodeManager or a DataNode (its ports and directories), for several on one host. The NameNode's
    plan also says how to format it the first time.

    Reads the templates and the jar directory; writes nothing.
    """
    logs = jvm.cluster_dir / "logs"
    if role == "zookeeper":
        files, settings = conf.zk_files(spec, "0.0.0.0")
        return DaemonPlan(
            command=tuple(jvm.zookeeper(java, console=True)),
            env={},
            files=files,
            settings=settings,
            directories=(logs, jvm.cluster_dir / "zk"),
        )
    tarball, jars = am_archive(jvm.lib)
    name = {"resourcemanager": "rm", "namenode": "nn", "nodemanager": f"nm-{node}", "datanode": f"dn-{node}"}[role]
    files, settings = conf.daemon_files(
        name, spec, tarball, node=None if role in ("resourcemanager", "namenode") else node, placement=placement
    )
    command, added = jvm.daemon(java, name, console=True)
    hdfs_dirs = (jvm.cluster_dir / "hdfs",) if role in ("namenode", "datanode") else ()
    return DaemonPlan(
        command=tuple(command),
        env=added,
        files=files,
        settings=settings,
        directories=(logs, *hdfs_dirs),
        archive=tarball,
        archive_jars=len(jars),
        format_command=tuple(jvm.format_namenode(java)) if role == "namenode" else (),
        formatted=namenode_image(jvm.cluster_dir) if role == "namenode" else None,
    )


def prepare(plan: DaemonPlan, lib: Path) -> None:
    """Create what ``plan`` needs on disk: its directories, the ApplicationMaster archive of the jars in ``lib``
    (packed when stale), its configuration files.

    Raises:
        OSError: something of it cannot be written.
    """
    for directory in plan.directories:
        directory.mkdir(parents=True, exist_ok=True)
    if plan.archive is not None:
        pack_am_archive(lib, lambda msg: log.info("%s", msg))
    write_files(plan.files)
