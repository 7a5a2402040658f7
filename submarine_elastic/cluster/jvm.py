"""The pseudo-cluster's JVM command lines: each daemon's main class, heap and flags, its log settings and its
environment, from the Maven-resolved jars. Builds lists of strings; starts nothing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.cluster.kdc import KerberosRealm

RM_MAIN = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NM_MAIN = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
RM_HEAP = "512m"
NM_HEAP = "256m"
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
NN_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DN_MAIN = "org.apache.hadoop.hdfs.server.datanode.DataNode"
NN_HEAP = "256m"
DN_HEAP = "128m"
#: Each JVM daemon's main class and heap, by the prefix of its name.
MAINS = {"rm": (RM_MAIN, RM_HEAP), "nm": (NM_MAIN, NM_HEAP), "nn": (NN_MAIN, NN_HEAP), "dn": (DN_MAIN, DN_HEAP)}

# Hadoop 3.4.x predates Java 17: Guice, Jersey 1 and Hadoop's own reflection need these packages
# opened, in every daemon and in the service ApplicationMaster (yarn.service.am.java.opts).
JAVA17_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.lang",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.regex",
        "java.util.zip",
        "java.math",
        "java.text",
        "java.time",
        "sun.nio.ch",
        "sun.nio.cs",
        "sun.security.util",
        "sun.security.x509",
        "jdk.internal.misc",
    )
] + [
    "--add-exports=java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
]
# Small heaps and a quick-start JIT: the whole cluster shares two cores with the training jobs.
JVM_LEAN = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]
AM_JAVA_OPTS = " ".join(["-Xmx256m", *JVM_LEAN, *JAVA17_OPENS])


def find_java() -> str | None:
    """The ``java`` of ``JAVA_HOME``, else of ``PATH``; None when there is none."""
    home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return shutil.which("java", path=f"{home}/bin:{path}" if home else path)


def java_home(java: str) -> str:
    """``JAVA_HOME``, else the installation ``java`` belongs to."""
    return os.environ.get("JAVA_HOME") or str(Path(java).resolve().parent.parent)


@dataclass(frozen=True)
class JvmCommands:
    """The command lines of the daemons of the cluster in ``cluster_dir``, run from the jars in ``lib`` with
    their configuration in ``cluster_dir/conf/<daemon>``."""

    cluster_dir: Path
    lib: Path

    def zookeeper(self, java: str, *, console: bool = False) -> list[str]:
        """ZooKeeper's command line (its log to the console with ``console``, else to ``logs/zk.log``)."""
        conf = self.cluster_dir / "conf" / "zk"
        return [
            java,
            "-Xmx128m",
            *JVM_LEAN,
            *self.log_props("zk", conf, console=console),
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            f"{conf}:{self.lib}/*",
            ZK_MAIN,
            str(conf / "zoo.cfg"),
        ]

    def daemon(
        self, java: str, name: str, *, console: bool = False, realm: KerberosRealm | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The command line and added environment of the RM (``rm``), a NodeManager (``nm-<i>``), the NameNode
        (``nn``) or a DataNode (``dn-<i>``); with ``realm``, pointed at its Kerberos configuration."""
        main, heap = MAINS[name.split("-")[0]]
        conf = self.cluster_dir / "conf" / name
        cmd = [java, f"-Xmx{heap}", *JVM_LEAN, *JAVA17_OPENS, *self.log_props(name, conf, console=console)]
        if realm is not None:
            cmd.append(f"-Djava.security.krb5.conf={realm.krb5_conf}")
        if name == "rm":
            # Where the services API finds the AM's jars when no framework tarball is usable.
            cmd.append(f"-Dservice.libdir={self.lib}")
        cmd += ["-cp", f"{conf}:{self.lib}/*", main]
        daemon_env = {
            "HADOOP_CONF_DIR": str(conf),
            "JAVA_HOME": java_home(java),
            "HADOOP_YARN_HOME": str(self.lib.parent),
            "HADOOP_COMMON_HOME": str(self.lib.parent),
        }
        if realm is not None:
            daemon_env["KRB5_CONFIG"] = str(realm.krb5_conf)
        return cmd, daemon_env

    def format_namenode(self, java: str) -> list[str]:
        """``NameNode -format``, non-interactive, its log to the console."""
        conf = self.cluster_dir / "conf" / "nn"
        return [
            java, f"-Xmx{NN_HEAP}", *JVM_LEAN, *JAVA17_OPENS, *self.log_props("nn-format", conf, console=True),
            "-cp", f"{conf}:{self.lib}/*", NN_MAIN, "-format", "-nonInteractive",
        ]  # fmt: skip

    def log_props(self, name: str, conf: Path, *, console: bool = False) -> list[str]:
        """The system properties that send a daemon's log to ``logs/<name>.log`` (or the console) and name the
        cluster on its command line (``-Dsubmarine.cluster.dir``, how ``down`` finds it)."""
        logs = self.cluster_dir / "logs"
        appender = "console" if console else "RFA"
        return [
            f"-Dsubmarine.cluster.dir={self.cluster_dir}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dhadoop.log.dir={logs}",
            f"-Dhadoop.log.file={name}.log",
            f"-Dyarn.log.dir={logs}",
            f"-Dyarn.log.file={name}.log",
            f"-Dhadoop.root.logger=INFO,{appender}",
            f"-Dzookeeper.root.logger=INFO,{appender}",
            f"-Dzookeeper.log.dir={logs}",
            f"-Dzookeeper.log.file={name}.log",
        ]
