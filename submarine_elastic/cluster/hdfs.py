"""The pseudo-cluster's HDFS: formatting the NameNode, waiting until its DataNodes are live, and the files YARN
and the jobs need on a fresh one.

The NameNode and the DataNodes are started as the other daemons are (:mod:`submarine_elastic.cluster.local`);
what they answer is read from their JMX servlets, what is made on HDFS goes through WebHDFS.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import requests
from tenacity import RetryCallState

from submarine_elastic.cluster.api import ClusterSpec, Daemon, DaemonStartError, Progress, host_address
from submarine_elastic.cluster.probes import get_json
from submarine_elastic.cluster.processes import alive, poll, tail
from submarine_elastic.limits import HDFS_JOBS
from submarine_elastic.webhdfs import WebHdfs, WebHdfsError

#: Where ``up`` puts the ApplicationMaster's jar archive on a cluster's HDFS (``yarn.service.framework.path``).
HDFS_FRAMEWORK = "/yarn/framework/service-dep.tar.gz"
#: The Services API's files on a cluster's HDFS (``yarn.service.base.path``): ``services/<name>`` below it is
#: each service's, made by its user (0750). Mode 1777 (sticky, like /tmp) on both, so any user's service
#: may start and none removes another's.
HDFS_SERVICES = "/yarn-services"


def namenode_image(cluster_dir: Path) -> Path:
    """Present once the NameNode's name directory in ``cluster_dir`` is formatted."""
    return cluster_dir / "hdfs" / "name" / "current" / "VERSION"


def format_namenode(cluster_dir: Path, command: list[str]) -> None:
    """Run ``command`` (``NameNode -format``) unless the name directory is formatted already (blocks for a few
    seconds, at most 300).

    Raises:
        DaemonStartError: the format failed (its output's tail in the message).
    """
    if namenode_image(cluster_dir).is_file():
        return
    out = cluster_dir / "logs" / "nn-format.out"
    with out.open("wb") as stdout:
        done = subprocess.run(
            command, stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cluster_dir,
            env={**os.environ, "HADOOP_CONF_DIR": str(cluster_dir / "conf" / "nn")}, check=False, timeout=300,
        )  # fmt: skip
    if done.returncode != 0 or not namenode_image(cluster_dir).is_file():
        text = "\n".join(out.read_text(errors="replace").splitlines()[-25:])
        raise DaemonStartError("nn", f"could not be formatted (exit {done.returncode})", out, text)


def wait_datanodes(spec: ClusterSpec, namenode: Daemon, datanodes: list[Daemon], timeout: float, say: Progress) -> None:
    """Block until the NameNode answers out of safe mode with every DataNode of ``datanodes`` live
    (polled every 0.5 s, at most ``timeout`` s).

    Raises:
        DaemonStartError: a daemon exited, or did not get ready in time (naming it, with its log).
    """
    expected = {d.name: datanode_address(spec, int(d.name.removeprefix("dn-"))) for d in datanodes}
    seen = -1
    live: set[str] = set()

    def ready() -> bool:
        nonlocal live, seen
        for d in (namenode, *datanodes):
            if not alive(d):
                raise DaemonStartError(d.name, "exited during start", d.log, tail(d))
        info = namenode_info(str(spec.webhdfs_url))
        if info is None:
            return False
        addresses = {node.get("xferaddr") for node in info["live"].values()}
        # The NameNode lists a restarted DataNode under the old one's address until that expires: the
        # DataNode itself must also say it is registered.
        live = {
            name
            for name, address in expected.items()
            if address in addresses and datanode_registered(spec, int(name.removeprefix("dn-")))
        }
        if len(live) != seen:
            seen = len(live)
            say(f"{seen}/{len(datanodes)} DataNodes live")
        return len(live) == len(datanodes) and not info["safemode"]

    def missing(_state: RetryCallState) -> bool:
        worst = next((d for d in datanodes if d.name not in live), namenode)
        raise DaemonStartError(
            worst.name, f"was not live in the NameNode out of safe mode within {timeout:.0f} s", worst.log,
            tail(worst),
        )  # fmt: skip

    poll(ready, timeout, 0.5, missing)


def wait_writable(webhdfs_url: str, timeout: float, namenode_log: Path) -> None:
    """Block until the NameNode at ``webhdfs_url`` has a live DataNode and is out of safe mode (polled every
    second, at most ``timeout`` s).

    Raises:
        DaemonStartError: it had none in time (pointing at ``namenode_log``).
    """

    def ready() -> bool:
        info = namenode_info(webhdfs_url)
        return info is not None and bool(info["live"]) and not info["safemode"]

    def give_up(_state: RetryCallState) -> bool:
        raise DaemonStartError("nn", f"at {webhdfs_url} had no live DataNode within {timeout:.0f} s", namenode_log, "")

    poll(ready, timeout, 1.0, give_up)


def init_hdfs(webhdfs_url: str, cluster_dir: Path, tarball: Path, say: Progress) -> None:
    """What YARN and the jobs need on a fresh HDFS, made as its superuser: ``/tmp``, :data:`HDFS_SERVICES`
    and its ``services``, :data:`HDFS_JOBS` and ``<hadoop.tmp.dir>/.yarn/services``, where each service's AM
    makes its instances' directories (each 1777: every user makes a directory of their own there), and the
    ApplicationMaster's jar archive ``tarball`` at :data:`HDFS_FRAMEWORK` (readable by all, as every service's
    AM localizes it).

    Raises:
        DaemonStartError: HDFS refused or did not answer (naming the call).
    """
    try:
        with WebHdfs(webhdfs_url, getpass.getuser()) as hdfs:
            instances = str(cluster_dir / "tmp" / ".yarn" / "services")  # hadoop.tmp.dir, read as an HDFS path
            for shared in ("/tmp", HDFS_SERVICES, f"{HDFS_SERVICES}/services", HDFS_JOBS, instances):
                hdfs.mkdirs(shared, 0o1777)
                hdfs.set_permission(shared, 0o1777)  # MKDIRS applies the NameNode's umask
            framework = hdfs.status(HDFS_FRAMEWORK)
            if framework is None or framework["length"] != tarball.stat().st_size:
                say(f"putting the ApplicationMaster's jars on HDFS ({tarball.stat().st_size >> 20} MB)")
                hdfs.mkdirs(str(Path(HDFS_FRAMEWORK).parent), 0o755)
                with tarball.open("rb") as data:
                    hdfs.create(HDFS_FRAMEWORK, data, 0o644)
    except WebHdfsError as exc:
        nn = cluster_dir / "logs" / "nn.log"
        raise DaemonStartError("nn", f"refused the cluster's first files: {exc}", nn, "") from exc


def datanode_address(spec: ClusterSpec, index: int) -> str:
    """The data-transfer address DataNode ``index`` registers with the NameNode."""
    host = host_address(spec.subnet, index) if spec.hosts else spec.host
    return f"{host}:{spec.datanode_ports(index)['dfs.datanode.address']}"


def datanode_registered(spec: ClusterSpec, index: int) -> bool:
    """Whether DataNode ``index`` says (its JMX servlet) that it is registered with the NameNode."""
    host = host_address(spec.subnet, index) if spec.hosts else spec.host
    port = spec.datanode_ports(index)["dfs.datanode.http.address"]
    try:
        beans = get_json(f"http://{host}:{port}/jmx", params={"qry": "Hadoop:service=DataNode,name=DataNodeInfo"})[
            "beans"
        ]
        actors = json.loads(beans[0]["BPServiceActorInfo"])
    except (requests.RequestException, KeyError, IndexError, ValueError, TypeError):
        return False
    return any(actor.get("ActorState") == "RUNNING" for actor in actors)


def namenode_info(webhdfs_url: str) -> dict[str, Any] | None:
    """The NameNode's live DataNodes (by name, each with its ``xferaddr``) and whether it is in safe mode,
    from its JMX servlet at its web address; None while it does not answer."""
    try:
        beans = get_json(f"{webhdfs_url}/jmx", params={"qry": "Hadoop:service=NameNode,name=NameNodeInfo"})["beans"]
        return {"live": json.loads(beans[0]["LiveNodes"]), "safemode": bool(beans[0].get("Safemode"))}
    except (requests.RequestException, KeyError, IndexError, ValueError, TypeError):
        return None
