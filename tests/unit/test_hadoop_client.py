"""``submarine yarn``'s command line: Hadoop's CLI class for each subcommand, the cluster's jars and client
configuration, and a clear refusal (no cluster, an unknown subcommand, a Kerberized cluster) before any JVM."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterNotUpError, ClusterSpec
from submarine_elastic.cluster.client import HadoopClientError, yarn_command
from submarine_elastic.cluster.state import STATE_FILE, StateFile


def cluster(tmp_path: Path, *, secure: bool = False) -> tuple[Path, Path]:
    directory, lib = tmp_path / "cluster", tmp_path / "lib"
    (directory / "conf" / "rm").mkdir(parents=True)
    (directory / "conf" / "rm" / "yarn-site.xml").write_text("<configuration/>")
    lib.mkdir()
    (lib / "hadoop-yarn-client-3.4.2.jar").write_bytes(b"")
    StateFile(directory / STATE_FILE).write(ClusterSpec(nodes=1, secure=secure), [])
    return directory, lib


def test_app_runs_application_cli_with_the_subcommand_and_the_rms_configuration(tmp_path: Path):
    directory, lib = cluster(tmp_path)
    cmd, added = yarn_command(directory, lib, ["app", "-flex", "job", "-component", "worker", "3"])
    conf = directory / "conf" / "rm"
    assert cmd[cmd.index("-cp") + 1] == f"{conf}:{lib}/*"
    assert cmd[cmd.index("-cp") + 2 :] == [
        "org.apache.hadoop.yarn.client.cli.ApplicationCLI",
        *("app", "-flex", "job", "-component", "worker", "3"),
    ]
    assert added["HADOOP_CONF_DIR"] == str(conf)


def test_node_runs_node_cli_without_the_subcommand(tmp_path: Path):
    directory, lib = cluster(tmp_path)
    cmd, _ = yarn_command(directory, lib, ["node", "-list"])
    assert cmd[-2:] == ["org.apache.hadoop.yarn.client.cli.NodeCLI", "-list"]


def test_an_unknown_subcommand_is_refused_naming_the_known_ones(tmp_path: Path):
    directory, lib = cluster(tmp_path)
    with pytest.raises(HadoopClientError, match=r"'rmadmin' is not one of: app, application"):
        yarn_command(directory, lib, ["rmadmin", "-refreshQueues"])


def test_no_cluster_is_refused(tmp_path: Path):
    with pytest.raises(ClusterNotUpError, match="no cluster is up"):
        yarn_command(tmp_path / "none", tmp_path, ["app", "-list"])


def test_a_kerberized_cluster_is_refused_with_the_reason(tmp_path: Path):
    directory, lib = cluster(tmp_path, secure=True)
    with pytest.raises(HadoopClientError, match="Kerberized"):
        yarn_command(directory, lib, ["app", "-list"])


def test_the_cli_names_the_refusal_and_exits_non_zero(tmp_path: Path):
    result = CliRunner().invoke(cli, ["yarn", "--cluster-dir", str(tmp_path / "none"), "app", "-list"])
    assert result.exit_code == 1
    assert "no cluster is up" in result.output
    usage = CliRunner().invoke(cli, ["yarn"])
    assert usage.exit_code == 0 and "submarine yarn app -flex JOB -component worker 3" in usage.output
