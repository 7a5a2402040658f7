"""Entry point of the ``submarine`` command: one click group, a sub-group per area."""

from __future__ import annotations

import logging

import click
from rich.console import Console
from rich.logging import RichHandler

from submarine_elastic import __version__
from submarine_elastic.cli.bridge import bridge
from submarine_elastic.cli.cluster import cluster
from submarine_elastic.cli.controller import controller
from submarine_elastic.cli.dse import dse
from submarine_elastic.cli.job import job
from submarine_elastic.cli.metrics import metrics
from submarine_elastic.cli.sim import sim


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="submarine")
@click.option("-v", "--verbose", count=True, help="More log output (-v: info, -vv: debug).")
def cli(verbose: int) -> None:
    """Elastic TensorFlow training on Hadoop YARN."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(message)s", handlers=[RichHandler(console=Console(stderr=True), show_path=False)]
    )


cli.add_command(cluster)
cli.add_command(job)
cli.add_command(controller)
cli.add_command(metrics)
cli.add_command(sim)
cli.add_command(dse)
cli.add_command(bridge)


def main() -> None:
    cli(prog_name="submarine")
