"""Entry point of the ``submarine`` command: one click group, a sub-group per area."""

from __future__ import annotations

import importlib
import logging

import click

from submarine_elastic import __version__

#: Each sub-group: the module that defines it (imported only when the sub-group runs, so that
#: ``submarine --help`` does not load the simulator's plots or the controller) and its one-line help.
SUBCOMMANDS = {
    "cluster": ("submarine_elastic.cli.cluster", "Start, stop and inspect the local Hadoop YARN pseudo-cluster."),
    "job": ("submarine_elastic.cli.job", "Run, resize, inspect and stop training jobs."),
    "controller": (
        "submarine_elastic.cli.controller",
        "The controller: metrics in, policy decisions out, applied to running jobs.",
    ),
    "metrics": ("submarine_elastic.cli.metrics", "Run the metrics service that training processes report to."),
    "sim": ("submarine_elastic.cli.sim", "Trace-driven cluster simulator (job physics measured by Pollux, OSDI 2021)."),
    "replay": (
        "submarine_elastic.cli.replay",
        "Replay a workload live on the pseudo-cluster, on emulated GPUs, static against elastic.",
    ),
    "dse": ("submarine_elastic.cli.dse", "Design-space exploration on the simulator or on real jobs."),
    "bridge": (
        "submarine_elastic.cli.bridge",
        "The py4j bridge: a JVM reports jobs and reads the controller's decisions.",
    ),
    "yarn": ("submarine_elastic.cli.yarn", "Hadoop's own yarn command line (app, node, queue, logs) on the cluster."),
}


class LazyGroup(click.Group):
    """A group whose sub-groups are imported when they are used; their help lines are listed without."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = getattr(importlib.import_module(entry[0]), cmd_name)
        if not isinstance(command, click.Command):
            raise TypeError(f"{entry[0]}.{cmd_name} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_line) for name, (_module, help_line) in SUBCOMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="submarine")
@click.option("-v", "--verbose", count=True, help="More log output (-v: info, -vv: debug).")
def cli(verbose: int) -> None:
    """Elastic TensorFlow training on Hadoop YARN."""
    from rich.console import Console
    from rich.logging import RichHandler

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(message)s", handlers=[RichHandler(console=Console(stderr=True), show_path=False)]
    )
    if verbose == 0:
        # urllib3 warns of each connection retry (several lines each, while a ResourceManager is down); the
        # command's own error says what failed once it gave up.
        logging.getLogger("urllib3").setLevel(logging.ERROR)


def main() -> None:
    try:
        cli(prog_name="submarine")
    except Exception as exc:
        # A Kerberos login that cannot work (a keytab without the principal) is refused where a command makes
        # its YARN client: the reason, not a traceback.
        from submarine_elastic.yarn.api import YarnAuthError

        if not isinstance(exc, YarnAuthError):
            raise
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(1) from exc
