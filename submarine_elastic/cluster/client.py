"""Hadoop's own client tools against the pseudo-cluster: the JVM command line of one of the ``yarn`` command's
CLI classes, with the cluster's jars and the ResourceManager's configuration as its client configuration.
Builds lists of strings; starts nothing.
"""

from __future__ import annotations

from pathlib import Path

from submarine_elastic.cluster.api import ClusterError, ClusterNotUpError
from submarine_elastic.cluster.jvm import JAVA17_OPENS, JVM_LEAN, find_java, java_home
from submarine_elastic.cluster.state import STATE_FILE, StateFile

#: ``yarn SUBCOMMAND`` -> the class Hadoop's ``yarn`` script runs for it, and whether the subcommand's own name
#: is the first argument the class reads (ApplicationCLI serves three subcommands and tells them apart by it).
YARN_COMMANDS = {
    "application": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
    "app": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
    "applicationattempt": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
    "container": ("org.apache.hadoop.yarn.client.cli.ApplicationCLI", True),
    "node": ("org.apache.hadoop.yarn.client.cli.NodeCLI", False),
    "queue": ("org.apache.hadoop.yarn.client.cli.QueueCLI", False),
    "logs": ("org.apache.hadoop.yarn.client.cli.LogsCLI", False),
}
CLIENT_HEAP = "256m"


class HadoopClientError(ClusterError):
    """Hadoop's client cannot be run against the cluster (no Java, no jars, a subcommand it does not map, a
    cluster it cannot authenticate to)."""


def yarn_command(cluster_dir: Path, lib: Path, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and added environment that run ``yarn ARGS...`` (Hadoop's CLI class for ``args[0]``,
    :data:`YARN_COMMANDS`) against the cluster recorded in ``cluster_dir``, from the jars in ``lib``.

    Raises:
        ClusterNotUpError: no cluster is recorded in ``cluster_dir``.
        HadoopClientError: an unknown subcommand, no Java or no jars, or a Kerberized cluster (refused: Hadoop's
            client would need a Kerberos login of its own).
    """
    if not args or args[0] not in YARN_COMMANDS:
        known = ", ".join(sorted(YARN_COMMANDS))
        raise HadoopClientError(f"yarn subcommand {args[0] if args else '(none)'!r} is not one of: {known}")
    try:
        recorded = StateFile(cluster_dir / STATE_FILE).read()
    except (ValueError, KeyError, TypeError) as exc:
        raise HadoopClientError(f"cannot read the cluster's state in {cluster_dir / STATE_FILE}: {exc}") from exc
    if recorded is None:
        raise ClusterNotUpError(f"no cluster is up in {cluster_dir} (submarine cluster up; or set --cluster-dir)")
    spec, _daemons = recorded
    if spec.secure:
        raise HadoopClientError(
            "the cluster is Kerberized (cluster up --secure): Hadoop's yarn client would need a Kerberos login of "
            "its own, which submarine yarn does not make; use submarine job and cluster commands there"
        )
    conf = cluster_dir / "conf" / "rm"
    if not (conf / "yarn-site.xml").is_file():
        raise HadoopClientError(f"the cluster's client configuration {conf / 'yarn-site.xml'} is missing")
    if not any(lib.glob("hadoop-yarn-client-*.jar")):
        raise HadoopClientError(f"no Hadoop YARN client jar in {lib} (submarine cluster install-jars)")
    java = find_java()
    if java is None:
        raise HadoopClientError("Java is required to run Hadoop's yarn client (no java on JAVA_HOME or PATH)")
    main, named = YARN_COMMANDS[args[0]]
    cmd = [
        java,
        f"-Xmx{CLIENT_HEAP}",
        *JVM_LEAN,
        *JAVA17_OPENS,
        f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
        "-Dhadoop.root.logger=WARN,console",
        "-cp",
        f"{conf}:{lib}/*",
        main,
        *(args if named else args[1:]),
    ]
    return cmd, {"HADOOP_CONF_DIR": str(conf), "JAVA_HOME": java_home(java)}
