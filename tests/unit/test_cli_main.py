"""The ``submarine`` group loads its sub-groups lazily: ``--help`` lists them without importing them."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from submarine_elastic.cli.main import SUBCOMMANDS, cli


def test_every_listed_subcommand_loads_and_its_help_line_is_its_own() -> None:
    ctx = click.Context(cli)
    for name, (_module, help_line) in SUBCOMMANDS.items():
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command), name  # a sub-group, or one command (`replay`)
        assert command.get_short_help_str(limit=200) == help_line, f"{name}: the listed help line drifted"
    assert cli.get_command(ctx, "nope") is None


def test_help_lists_every_subcommand_without_importing_them() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from submarine_elastic.cli.main import cli; "
        "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in sys.modules if m.startswith('submarine_elastic.cli.') and m != "
        "'submarine_elastic.cli.main'), 'matplotlib' in sys.modules); print(r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "[] False"
    for name in SUBCOMMANDS:
        assert f"  {name}" in out


def test_an_unknown_subcommand_is_named() -> None:
    result = CliRunner().invoke(cli, ["nope"])
    assert result.exit_code == 2 and "No such command 'nope'" in result.output


def test_job_commands_load_neither_the_controller_nor_the_spec_models() -> None:
    # What `submarine job show` imports before it runs: pydantic (the YARN spec models), the controller,
    # NumPy and TensorFlow load only for the commands that need them.
    code = (
        "import sys, submarine_elastic.cli.job\n"
        "heavy = {'pydantic', 'numpy', 'matplotlib', 'tensorflow', 'horovod', 'yaml'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy),"
        " sorted(m for m in sys.modules if m.startswith('submarine_elastic.controller')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"
