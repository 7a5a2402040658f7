"""scripts/gpu_check.py, the check for a machine with GPUs, run here against the pseudo-cluster's stand-in
``nvidia-smi`` (no GPU, no PyTorch): it parses and saves the discovery XML and says that it skipped the CUDA part."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.cluster.hadoop_conf import write_files

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch would probe CUDA")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *args], capture_output=True, text=True, env=env
    )


def test_it_lists_and_saves_the_devices_and_says_what_it_skipped(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    write_files(cluster.conf.daemon_files("nm-0", ClusterSpec(gpus_per_node=2), tmp_path / "t.tgz", node=0)[0])
    standin = cluster.dir / "conf" / "nm-0" / "gpu" / "nvidia-smi"
    done = check("--nvidia-smi", str(standin), "--save", str(tmp_path / "saved.xml"))
    assert done.returncode == 0, done.stderr
    assert "lists 2 GPU(s)" in done.stdout and "minor 1" in done.stdout
    assert "the stand-in built from it prints 2 devices: ok" in done.stdout
    assert "(b) skipped: PyTorch is not installed" in done.stdout
    assert (tmp_path / "saved.xml").read_bytes() == subprocess.run([standin, "-x", "-q"], capture_output=True).stdout


def test_without_nvidia_smi_it_says_so(tmp_path: Path) -> None:
    done = check("--nvidia-smi", str(tmp_path / "nvidia-smi"))
    assert done.returncode == 2
    assert "nvidia-smi" in done.stderr and "No such file" in done.stderr
