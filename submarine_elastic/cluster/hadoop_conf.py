"""The pseudo-cluster's Hadoop configuration: each daemon's ``*-site.xml`` files, made from the shared templates
(``cluster/hadoop/conf``, also the docker-compose cluster's) with the overrides one cluster needs: addresses and
ports, directories, node size, queues, GPUs, HDFS and SPNEGO. Also what a client configuration says about HDFS.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic import resources
from submarine_elastic.cluster import gpu, queues
from submarine_elastic.cluster.api import ClusterSpec, Placement, PrerequisiteError, host_address
from submarine_elastic.cluster.hdfs import HDFS_FRAMEWORK, HDFS_SERVICES
from submarine_elastic.cluster.jvm import AM_JAVA_OPTS
from submarine_elastic.cluster.kdc import KerberosRealm

CONF_FILES = (
    "core-site.xml",
    "yarn-site.xml",
    "hdfs-site.xml",
    "capacity-scheduler.xml",
    "log4j.properties",
    "yarnservice-log4j.properties",  # the services API ships it with every ApplicationMaster
)
#: The (empty) web application each HDFS daemon's HTTP server needs on its classpath: the Maven jars do not
#: carry Hadoop's ``webapps/`` directory, and WebHDFS is served without one.
HDFS_WEBAPPS = {"nn": "hdfs", "dn": "datanode"}
_EMPTY_WEBAPP = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<web-app xmlns="http://xmlns.jcp.org/xml/ns/javaee" version="3.1"/>\n'
)


@dataclass(frozen=True)
class HadoopConf:
    """The configuration of the daemons of the cluster in ``cluster_dir`` (each in ``conf/<daemon>``), made from
    the templates in ``template``."""

    cluster_dir: Path
    template: Path

    def write(
        self, name: str, spec: ClusterSpec, tarball: Path, node: int | None = None, placement: Placement | None = None
    ) -> Path:
        """Writes daemon ``name``'s configuration (:meth:`daemon_files`); returns its directory.

        Raises:
            OSError: a template cannot be read or a file written.
        """
        write_files(self.daemon_files(name, spec, tarball, node, placement)[0])
        return self.cluster_dir / "conf" / name

    def daemon_files(
        self, name: str, spec: ClusterSpec, tarball: Path, node: int | None = None, placement: Placement | None = None
    ) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """One daemon's configuration files (path -> content), and the settings each overrides in the
        shared templates; reads the templates, writes nothing. ``node`` numbers a NodeManager; ``placement``
        puts the daemons on the hosts it names (each its own machine or container).

        Raises:
            OSError: a template cannot be read.
        """
        conf = self.cluster_dir / "conf" / name
        files = {conf / f: (self.template / f).read_bytes() for f in CONF_FILES}
        zk_host, rm_host, node_host = (
            (placement.zk_host, placement.rm_host, placement.node_host)
            if placement
            else (spec.host, spec.host, spec.node_host(node or 0))
        )
        nn_host = placement.nn_host if placement else spec.host
        core = {
            "hadoop.registry.zk.quorum": f"{zk_host}:{spec.zk_port}",
            "hadoop.zk.address": f"{zk_host}:{spec.zk_port}",
            "hadoop.tmp.dir": str(self.cluster_dir / "tmp"),
            "fs.defaultFS": f"hdfs://{nn_host}:{spec.namenode_port}" if spec.hdfs else "file:///",
        }
        yarn = {
            "yarn.resourcemanager.hostname": rm_host,
            **{k: f"{rm_host}:{p}" for k, p in spec.rm_ports().items()},
            # With HDFS the Services API keeps each service's files there, and the NodeManagers localize the AM's
            # jars from it.
            "yarn.service.base.path": HDFS_SERVICES if spec.hdfs else str(self.cluster_dir / "yarn-services"),
            "yarn.service.framework.path": f"{core['fs.defaultFS']}{HDFS_FRAMEWORK}"
            if spec.hdfs
            else f"file://{tarball}",
            "yarn.service.am.java.opts": AM_JAVA_OPTS,
            "yarn.nodemanager.resource.memory-mb": str(spec.node_memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(spec.node_vcores),
            "yarn.scheduler.maximum-allocation-mb": str(spec.node_memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(spec.node_vcores),
        }
        hdfs = self._hdfs_settings(name, spec, nn_host, placement) if spec.hdfs else {}
        if spec.hdfs:
            # Where the NameNode is, in core-site.xml too: a daemon loads hdfs-site.xml only once it first uses
            # HDFS, and a ResourceManager just started names no NameNode in its /conf until then, where `job run`
            # looks for one (seen in a chaos run: a job submitted a moment after an RM restart was refused).
            core.update({k: f"{nn_host}:{p}" for k, p in spec.namenode_ports().items()})
        if node is not None and name.startswith("nm-"):
            nm_dir = self.cluster_dir / f"nm-{node}"
            yarn.update({k: f"{node_host}:{p}" for k, p in spec.nm_ports(node).items()})
            yarn.update(
                {
                    "yarn.nodemanager.hostname": node_host,
                    "yarn.nodemanager.local-dirs": str(nm_dir / "local"),
                    "yarn.nodemanager.log-dirs": str(nm_dir / "logs"),
                    "yarn.nodemanager.recovery.dir": str(nm_dir / "recovery"),
                }
            )
        if placement:
            # Reached by host name, listening on every interface of the daemon's own container.
            yarn["yarn.resourcemanager.bind-host"] = "0.0.0.0"
            yarn["yarn.nodemanager.bind-host"] = "0.0.0.0"
        elif spec.secure:
            realm = KerberosRealm.of_cluster(self.cluster_dir, spec)
            # The RM's and the NodeManagers' web endpoints alike: one HTTP/<host> key serves the one host.
            core.update(spnego_settings(realm))
            if node is not None:
                # The containers reach the cluster's KDC as the NodeManager does (a host's /etc/krb5.conf elsewhere).
                allowed = xml_value(files[conf / "yarn-site.xml"], "yarn.nodemanager.env-whitelist") or ""
                yarn["yarn.nodemanager.env-whitelist"] = ",".join(filter(None, (allowed, "KRB5_CONFIG")))
        files[conf / "core-site.xml"] = xml_with(files[conf / "core-site.xml"], core)
        files[conf / "yarn-site.xml"] = xml_with(files[conf / "yarn-site.xml"], yarn)
        settings = {conf / "core-site.xml": core, conf / "yarn-site.xml": yarn}
        if hdfs:
            files[conf / "hdfs-site.xml"] = xml_with(files[conf / "hdfs-site.xml"], hdfs)
            settings[conf / "hdfs-site.xml"] = hdfs
        if spec.queues and (name == "rm" or (node is not None and name.startswith("nm-"))):
            for path, changed in self._queue_conf(conf, name, spec).items():
                files[path] = xml_with(files[path], changed)
                settings[path] = {**settings.get(path, {}), **changed}
        if spec.gpus_per_node and (name == "rm" or (node is not None and name.startswith("nm-"))):
            gpu_files, gpu_settings = self._gpu_conf(conf, name, spec, node_host)
            files.update(gpu_files)
            for path, changed in gpu_settings.items():
                files[path] = xml_with(files[path], changed)
                settings[path] = {**settings.get(path, {}), **changed}
        webapp = HDFS_WEBAPPS.get(name.split("-")[0])
        if webapp is not None:
            files[conf / "webapps" / webapp / "WEB-INF" / "web.xml"] = _EMPTY_WEBAPP
        return files, settings

    def _queue_conf(self, conf: Path, name: str, spec: ClusterSpec) -> dict[Path, dict[str, str]]:
        """A cluster with queues' settings in the RM's or a NodeManager's configuration in ``conf``: the RM gets
        the queue hierarchy and the preemption monitor, a NodeManager the delay a preempted container has
        between SIGTERM and SIGKILL."""
        if name == "rm":
            return {
                conf / "capacity-scheduler.xml": queues.scheduler_settings(spec.queues),
                # The NodeManagers' kill delay too, as in the one yarn-site.xml of a real cluster: `job run` reads it.
                conf / "yarn-site.xml": {**queues.monitor_settings(), **queues.nodemanager_settings()},
            }
        return {conf / "yarn-site.xml": queues.nodemanager_settings()}

    def _gpu_conf(
        self, conf: Path, name: str, spec: ClusterSpec, node_host: str
    ) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """A GPU cluster's additions to the RM's or a NodeManager's configuration in ``conf``: files to write
        (``resource-types.xml``; a NodeManager's stand-in ``nvidia-smi`` and what it prints) and settings to
        change: the RM schedules by every resource, a NodeManager runs the GPU plugin on the stand-in."""
        files = {conf / "resource-types.xml": gpu.resource_types_xml()}
        if name == "rm":
            return files, {conf / "capacity-scheduler.xml": dict(gpu.DOMINANT_RESOURCE_CALCULATOR)}
        directory = conf / "gpu"
        output = gpu.standin_output(resources.gpu_fixture().read_bytes(), spec.gpus_per_node, f"{node_host}/{name}")
        files[directory / gpu.OUTPUT] = output
        files[directory / gpu.EXECUTABLE] = gpu.standin_script(directory / gpu.OUTPUT)
        return files, {conf / "yarn-site.xml": gpu.plugin_settings(directory)}

    def _hdfs_settings(self, name: str, spec: ClusterSpec, nn_host: str, placement: Placement | None) -> dict[str, str]:
        """One daemon's ``hdfs-site.xml`` overrides: where the NameNode is (every daemon is its client), and
        for the NameNode and a DataNode their directories and addresses. A DataNode names itself by its
        host's address, where WebHDFS sends clients (the root namespace resolves no host name of the hosts)."""
        hdfs = {k: f"{nn_host}:{p}" for k, p in spec.namenode_ports().items()}
        if name == "nn":
            hdfs["dfs.namenode.name.dir"] = str(self.cluster_dir / "hdfs" / "name")
            if placement:
                hdfs.update({"dfs.namenode.rpc-bind-host": "0.0.0.0", "dfs.namenode.http-bind-host": "0.0.0.0"})
        elif name.startswith("dn-"):
            index = int(name.removeprefix("dn-"))
            if placement:
                bind, reached = "0.0.0.0", placement.node_host
            else:
                bind = reached = host_address(spec.subnet, index) if spec.hosts else spec.host
            hdfs.update({k: f"{bind}:{p}" for k, p in spec.datanode_ports(index).items()})
            hdfs["dfs.datanode.hostname"] = reached
            hdfs["dfs.datanode.data.dir"] = str(self.cluster_dir / "hdfs" / f"data-{index}")
        return hdfs

    def zk_files(self, spec: ClusterSpec, bind_host: str) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """ZooKeeper's configuration files and the settings ``zoo.cfg`` overrides; writes nothing."""
        conf = self.cluster_dir / "conf" / "zk"
        template = (self.template / "zoo.cfg").read_text()
        settings = {
            "dataDir": str(self.cluster_dir / "zk"),
            "clientPort": str(spec.zk_port),
            "clientPortAddress": bind_host,
        }
        lines = [line for line in template.splitlines() if not line.startswith(tuple(f"{k}=" for k in settings))]
        lines += [f"{k}={v}" for k, v in settings.items()]
        files = {
            conf / "zoo.cfg": ("\n".join(lines) + "\n").encode(),
            conf / "log4j.properties": (self.template / "log4j.properties").read_bytes(),
        }
        return files, {conf / "zoo.cfg": settings}


def write_files(files: Mapping[Path, bytes]) -> None:
    """Write each file; a script (``#!``) executable by its owner and readable by all, the others as the umask
    says."""
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if content.startswith(b"#!"):
            path.chmod(0o755)


def hdfs_addresses(conf_dir: Path) -> tuple[str, str] | None:
    """The HDFS a Hadoop client configuration names: its ``fs.defaultFS`` and the NameNode's WebHDFS address
    (``http://`` + ``dfs.namenode.http-address``), or None when its file system is not HDFS.

    Raises:
        PrerequisiteError: the directory lacks ``core-site.xml``, or names HDFS without ``hdfs-site.xml``
            saying where its NameNode's web address is.
    """
    try:
        default_fs = xml_value((conf_dir / "core-site.xml").read_bytes(), "fs.defaultFS") or ""
        if not default_fs.startswith("hdfs://"):
            return None
        web = xml_value((conf_dir / "hdfs-site.xml").read_bytes(), "dfs.namenode.http-address")
    except (OSError, ET.ParseError) as exc:
        raise PrerequisiteError(f"HADOOP_CONF_DIR {conf_dir}: {exc}") from exc
    if not web:
        raise PrerequisiteError(f"HADOOP_CONF_DIR {conf_dir}: hdfs-site.xml has no dfs.namenode.http-address")
    return default_fs, f"http://{web}"


def spnego_settings(realm: KerberosRealm) -> dict[str, str]:
    """The ``core-site.xml`` settings that put a daemon's web endpoints (the RM's REST API, Services API
    ``/app/v1/services`` and UI; a NodeManager's REST API and UI) behind SPNEGO with the realm's
    ``HTTP/<host>`` key: no anonymous access, ``?user.name=`` no longer names anyone. RPC between the daemons
    stays simple auth."""
    return {
        "hadoop.http.filter.initializers": "org.apache.hadoop.security.AuthenticationFilterInitializer",
        "hadoop.http.authentication.type": "kerberos",
        "hadoop.http.authentication.simple.anonymous.allowed": "false",
        "hadoop.http.authentication.kerberos.principal": realm.http_principal,
        "hadoop.http.authentication.kerberos.keytab": str(realm.http_keytab),
    }


def xml_value(text: bytes, key: str) -> str | None:
    """The value of one property of a Hadoop ``*-site.xml``, or None."""
    for prop in ET.fromstring(text).findall("property"):
        if prop.findtext("name") == key:
            return (prop.findtext("value") or "").strip()
    return None


def override_xml(path: Path, values: dict[str, str]) -> None:
    """Sets ``values`` in the Hadoop ``*-site.xml`` at ``path``, in place."""
    path.write_bytes(xml_with(path.read_bytes(), values))


def xml_with(text: bytes, values: Mapping[str, str]) -> bytes:
    """A Hadoop ``*-site.xml`` with ``values`` set (existing properties changed, new ones added)."""
    root = ET.fromstring(text)
    tree = ET.ElementTree(root)
    existing = {p.findtext("name"): p for p in root.findall("property")}
    for key, value in values.items():
        prop = existing.get(key)
        if prop is None:
            prop = ET.SubElement(root, "property")
            ET.SubElement(prop, "name").text = key
            ET.SubElement(prop, "value")
        value_el = prop.find("value")
        if value_el is None:
            value_el = ET.SubElement(prop, "value")
        value_el.text = value
    out = io.BytesIO()
    tree.write(out, encoding="utf-8", xml_declaration=True)
    return out.getvalue()
