"""``submarine sim run`` end to end on the toy application: files, plots, table, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from submarine_elastic.cli.main import cli

from ._sim_toy import TOY, write_toy_data

HEADER = "name,time,application,num_replicas,batch_size\n"


def setup(tmp_path: Path, rows: str) -> tuple[Path, Path]:
    data = write_toy_data(tmp_path / "data")
    workload = tmp_path / "w.csv"
    workload.write_text(HEADER + rows)
    return data, workload


def test_run_writes_results_and_plots_for_each_policy(tmp_path: Path):
    data, workload = setup(tmp_path, f"a,0,{TOY},4,4\nb,0,{TOY},4,4\nlate,10,{TOY},1,1\n")
    out = tmp_path / "out"
    args = ["sim", "run", "--data", str(data), "-w", str(workload), "-c", "1x4", "-o", str(out)]
    args += ["-p", "fifo", "-p", "greedy+fair-share", "--start-cost", "0", "--scale-out-cost", "0"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "fifo" in result.output and "greedy+fair-share" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [s["scheduler"] for s in summary] == ["fifo", "greedy+fair-share"]
    assert summary[0]["mean_jct_s"] == (25 + 50 + (50 - 10 + 100)) / 3
    for name in ("jct_cdf.png", "utilisation.png", "fifo/jobs.csv", "fifo/workers.png", "greedy+fair-share/jobs.csv"):
        assert (out / name).stat().st_size > 0, name


def test_without_a_policy_it_runs_fifo_and_the_goodput_policy(tmp_path: Path):
    data, workload = setup(tmp_path, f"a,0,{TOY},4,4\nb,0,{TOY},4,4\nlate,10,{TOY},1,1\n")
    out = tmp_path / "out"
    args = ["sim", "run", "--data", str(data), "-w", str(workload), "-c", "1x4", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [s["scheduler"] for s in summary] == ["fifo", "goodput+goodput"]
    assert all(s["finished"] == 3 for s in summary)


def test_bad_workload_row_is_named(tmp_path: Path):
    data, workload = setup(tmp_path, f"a,0,{TOY},4,4\nb,-5,{TOY},1,1\n")
    result = CliRunner().invoke(cli, ["sim", "run", "--data", str(data), "-w", str(workload), "-o", str(tmp_path)])
    assert result.exit_code == 1
    assert "line 3 (job 'b'): time must be >= 0 seconds, got -5" in result.output


def test_unknown_application_and_bad_cluster_and_bad_policy(tmp_path: Path):
    data, workload = setup(tmp_path, "a,0,resnet,4,4\n")
    base = ["sim", "run", "--data", str(data), "-w", str(workload), "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 1 and "unknown application 'resnet'; known: toy" in result.output
    workload.write_text(HEADER + f"a,0,{TOY},1,1\n")
    result = CliRunner().invoke(cli, [*base, "-c", "16by4"])
    assert result.exit_code == 2 and "NODESxGPUS" in result.output
    result = CliRunner().invoke(cli, [*base, "-p", "nope"])
    assert result.exit_code == 1 and "no policy named 'nope'" in result.output
