"""``submarine dse run`` on the real pseudo-cluster: each point a real elastic job, measured to a target loss
through the backend's own metrics service, killed afterwards; a rerun measures nothing again."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import requests
import yaml
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from tests.integration.conftest import AS_USER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def dse_apps(rm_url: str) -> list[dict]:
    """Every application of the RM (finished ones too) whose name is a DSE job's."""
    apps = requests.get(f"{rm_url}/ws/v1/cluster/apps", params=AS_USER, timeout=10).json()["apps"] or {}
    return [a for a in apps.get("app", []) if a["name"].startswith("dse-")]


def test_two_points_train_to_the_target_and_a_rerun_measures_nothing_again(
    yarn_cluster: LocalCluster, cluster_spec: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SUBMARINE_RM_URL", cluster_spec.rm_url)
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "name": "it-dse",
                "backend": {
                    "type": "pseudo-cluster",
                    "command": "{python} examples/train_elastic.py --epochs 5 --step-sleep 0.02",
                    "workdir": str(REPO),
                    "timeout_s": 240,
                },
                "objective": "time_to_target_s",
                "fixed": {"target_loss": 0.1, "workers": 1},
                "parameters": {"batch_size": [32, 64]},
            }
        )
    )
    out = tmp_path / "out"
    runner = CliRunner()

    first = runner.invoke(cli, ["dse", "run", str(space), "--out", str(out)], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "2 measured now, 0 already measured, 0 failed" in first.output, first.output
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok", row
        assert row["reached"] == "1.0", row
        assert 0 < float(row["time_to_target_s"]) < 60, row
        assert float(row["samples_per_s"]) > 0, row
        assert float(row["world_size"]) == 1.0, row
        assert float(row["final_loss"]) <= 0.1, row
    assert (out / "report.md").exists()
    apps = dse_apps(cluster_spec.rm_url)
    assert sorted(a["name"] for a in apps) == sorted(f"dse-{row['point_id']}" for row in rows)
    assert all(a["state"] in ("FINISHED", "KILLED", "FAILED") for a in apps), "a measured job still runs"

    again = runner.invoke(cli, ["dse", "run", str(space), "--out", str(out), "--no-report"], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert "0 measured now, 2 already measured, 0 failed" in again.output, again.output
    assert len(list(csv.DictReader((out / "results.csv").open()))) == 2
    assert len(dse_apps(cluster_spec.rm_url)) == 2, "a point was submitted again"
