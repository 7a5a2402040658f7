"""``submarine yarn ARGS...``: Hadoop's own ``yarn`` command line against the pseudo-cluster.

It runs the CLI class Hadoop's ``yarn`` script runs for the subcommand (``app``/``application``,
``applicationattempt``, ``container``, ``node``, ``queue``, ``logs``) in a JVM with the cluster's Hadoop jars and
its ResourceManager's configuration as the client configuration; the output and the exit code are Hadoop's. After
a ``yarn app -destroy JOB`` that succeeded, what ``submarine job kill`` removes of the job on this machine (its
files, its outcome record, the controller's entry) is removed too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from submarine_elastic import env

USAGE = """Usage: submarine yarn [--cluster-dir DIR] SUBCOMMAND ARGS...

  Hadoop's own yarn command line against the running pseudo-cluster (its jars
  and client configuration); the output and the exit code are Hadoop's.

  Subcommands: app (application), applicationattempt, container, node, queue,
  logs. Examples:

    submarine yarn app -list
    submarine yarn app -flex JOB -component worker 3
    submarine yarn app -decommission JOB -instances worker-1
    submarine yarn app -stop JOB      submarine yarn app -start JOB
    submarine yarn app -destroy JOB   submarine yarn node -list

  What each does to an elastic job: docs/hadoop-tools.md.
"""


@click.command(
    "yarn",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    add_help_option=False,
)
@click.option(
    "--cluster-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State directory of the cluster [default: $SUBMARINE_CLUSTER_DIR or ~/.submarine-elastic/cluster].",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def yarn(cluster_dir: Path | None, args: tuple[str, ...]) -> None:
    """Hadoop's own yarn command line (app, node, queue, logs) on the cluster."""
    from submarine_elastic.cluster import ClusterError
    from submarine_elastic.cluster.client import yarn_command

    if not args or args[0] in ("-h", "--help", "help"):
        click.echo(USAGE, nl=False)
        return
    directory = cluster_dir or env.settings().cluster_directory()
    try:
        cmd, added = yarn_command(directory, env.settings().hadoop_lib_directory(), list(args))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    import os

    returncode = _run(cmd, {**os.environ, **added})
    if returncode == 0 and args[0] in ("app", "application") and "-destroy" in args:
        _forget(args[args.index("-destroy") + 1] if args.index("-destroy") + 1 < len(args) else "")
    sys.exit(returncode)


def _run(cmd: list[str], environ: dict[str, str]) -> int:
    """Runs Hadoop's client on this process's standard output and error (passed through as the JVM writes them,
    or, where they are no files, as captured text); returns its exit code."""
    try:
        sys.stdout.fileno(), sys.stderr.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        done = subprocess.run(cmd, env=environ, check=False, capture_output=True, text=True)
        click.echo(done.stdout, nl=False)
        click.echo(done.stderr, nl=False, err=True)
        return done.returncode
    return subprocess.run(cmd, env=environ, check=False).returncode


def _forget(name: str) -> None:
    """What ``submarine job kill`` removes of a job whose service Hadoop destroyed (its files here and on HDFS,
    its outcome record, the controller's entry), and its driver's state file; a name this machine never ran
    is nothing to remove."""
    from submarine_elastic.cli.job import _controller_forgets, _job_files, _rm_url
    from submarine_elastic.submit.jobspec import job_dir, outcome_path
    from submarine_elastic.submit.store import forget_job, forget_outcome
    from submarine_elastic.webhdfs import WebHdfsError

    if not name:
        return
    outcome = outcome_path(name)
    state = outcome.with_name(f"{name}.driver.json")  # where the job's driver kept its state beside the outcome
    if not (job_dir(name).is_dir() or outcome.exists() or state.exists()):
        return
    try:
        forget_job(name, _job_files(_rm_url(), away_means_local=True))
        forget_outcome(name)
        state.unlink(missing_ok=True)
    except (OSError, WebHdfsError) as exc:
        raise click.ClickException(f"job {name}'s service is destroyed but its files stay: {exc}") from exc
    _controller_forgets(name)
