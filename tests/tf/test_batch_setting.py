"""A batch set for a running job (tf_hooks.elastic.rules.BatchSetting) is taken by every rank at the same
commit, with no re-form: examples/train_elastic.py under ``horovodrun -np 2``, where only rank 0's agent
has relayed the setting (each agent relays it at its own moment; rank 0's is what counts). From that commit
each step takes the new global batch in accum_steps + 1 micro-batches, the learning rate ramps to the
setting's, every sample of each epoch is trained on exactly once across the change, and the ranks end with
the same weights. Every SUBMARINE_NOISE_EVERY-th step (10 by default) both ranks measure the same gradient
noise scale, before and after the change, and report it in the step's StepRecord.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")
pytest.importorskip("horovod.tensorflow", reason="Horovod is not installed (pip install -e '.[horovod]')")

import numpy as np  # noqa: E402  (TensorFlow brings it)

REPO = Path(__file__).resolve().parents[2]
SAMPLES, BATCH, NEW_BATCH, NEW_ACCUM, NEW_LR = 512, 32, 96, 2, 0.08
#: Rank 0's agent relays the setting once rank 0 has made this many broadcasts (one per commit, after the sync).
RELAY_AFTER = 5

# Each rank: an agent channel stand-in that has relayed the setting only on rank 0, after RELAY_AFTER of the
# state's broadcasts; then the example as `python examples/train_elastic.py ...` runs it.
LAUNCH = f"""
import runpy, sys
import horovod.tensorflow as hvd
from tf_hooks.elastic import ring
from tf_hooks.elastic.rules import BatchSetting

class Relayed:
    calls = 0
    @property
    def batch(self):
        Relayed.calls += 1
        if hvd.rank() == 0 and Relayed.calls > {RELAY_AFTER}:
            return BatchSetting({NEW_BATCH}, {NEW_ACCUM}, {NEW_LR}, version=1, reason="goodput: batch up")
        return None

ring._channel = Relayed()

class Recorded:
    # The metrics sink the example reports its StepRecords to: one JSON line a record.
    def __init__(self):
        self.out = None
    def record(self, r):
        if self.out is None:
            self.out = open(f"{{sys.argv[-1]}}/records-rank{{r.rank}}.jsonl", "w")
        self.out.write(json.dumps(r._asdict()) + "\\n")
    def close(self, timeout=None):
        if self.out is not None:
            self.out.close()

import json
import tf_hooks.sender
tf_hooks.sender.make_sink = lambda config: Recorded()
sys.argv = ["train_elastic.py"] + sys.argv[1:]
runpy.run_path("examples/train_elastic.py", run_name="__main__")
"""


def test_every_rank_takes_rank_0s_batch_setting_at_one_commit_and_keeps_data_exactly_once(tmp_path: Path) -> None:
    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    if horovodrun is None:
        pytest.skip("horovodrun is not installed (pip install -e '.[horovod]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_"))}
    launch = tmp_path / "launch.py"  # horovodrun passes its command through a shell: no multi-line -c
    launch.write_text(LAUNCH)
    args = ["--epochs", "3", "--samples", str(SAMPLES), "--global-batch", str(BATCH), "--commit-every", "2"]
    result = subprocess.run(
        [horovodrun, "-np", "2", "--gloo", "--network-interface", "lo", sys.executable, str(launch), *args]
        + ["--log-dir", str(tmp_path / "log")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [
        json.loads(line)
        for f in sorted((tmp_path / "log").glob("steps-*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    by_rank = {r: sorted((x for x in records if x["rank"] == r), key=lambda x: x["step"]) for r in (0, 1)}
    assert by_rank[0] and len(by_rank[0]) == len(by_rank[1])

    # Both ranks switched at the same step, a commit boundary, and ran the same batches, rates and samples.
    switch = {r: next(x["step"] for x in steps if x["global_batch"] == NEW_BATCH) for r, steps in by_rank.items()}
    assert switch[0] == switch[1] and switch[0] % 2 == 0, switch
    for a, b in zip(by_rank[0], by_rank[1], strict=True):
        assert (a["step"], a["global_batch"], a["accum_steps"], a["batch"]) == (
            b["step"],
            b["global_batch"],
            b["accum_steps"],
            b["batch"],
        )
        assert a["lr"] == pytest.approx(b["lr"])
    before = [x for x in by_rank[0] if x["step"] < switch[0]]
    after = [x for x in by_rank[0] if x["step"] >= switch[0]]
    assert {(x["global_batch"], x["accum_steps"]) for x in before} == {(BATCH, 0)}
    assert {(x["global_batch"], x["accum_steps"]) for x in after} == {(NEW_BATCH, NEW_ACCUM)}
    # The learning rate ramps from the old one to the setting's (momentum compensation), then stays there.
    assert before[-1]["lr"] == pytest.approx(0.05) and after[-1]["lr"] == pytest.approx(NEW_LR)
    ramp = [x["lr"] for x in after]
    assert ramp == sorted(ramp) and ramp[0] == pytest.approx(0.05) and 0.05 < ramp[1] < NEW_LR

    # Exactly once: each epoch's steps cover every sample once, before and after the change; each step's ids
    # are the two ranks' shares of it.
    for epoch in (0, 1, 2):
        ids = [i for x in by_rank[0] if x["epoch"] == epoch for i in x["batch"]]
        assert sorted(ids) == list(range(SAMPLES)), f"epoch {epoch}"
    for a, b in zip(by_rank[0], by_rank[1], strict=True):
        assert sorted(a["ids"] + b["ids"]) == sorted(a["batch"])

    # The gradient noise scale: measured on the same steps by both ranks, with the same estimate, before and
    # after the change (gradients accumulated over micro-batches too), and reported with those steps.
    noise = {r: {x["step"]: x["noise"] for x in steps if "noise" in x} for r, steps in by_rank.items()}
    assert noise[0].keys() == noise[1].keys()
    assert min(noise[0]) < switch[0] < max(noise[0]), (sorted(noise[0]), switch)
    assert all(step % 10 == 0 for step in noise[0])
    for step, fields in noise[0].items():
        assert fields["gradient_noise_scale"] == pytest.approx(noise[1][step]["gradient_noise_scale"], rel=1e-6)
        assert 0 < fields["gradient_noise_scale"] < 1e6 and fields["grad_sq_norm"] > 0
    reported = {
        r: {
            x["step"]: x["gradient_noise_scale"]
            for x in map(json.loads, (tmp_path / "log" / f"records-rank{r}.jsonl").read_text().splitlines())
            if x["gradient_noise_scale"] is not None
        }
        for r in (0, 1)
    }
    for r in (0, 1):
        assert reported[r] == pytest.approx({step: f["gradient_noise_scale"] for step, f in noise[r].items()})

    weights = [np.load(tmp_path / "log" / f"weights-rank{r}.npz") for r in (0, 1)]
    for name in weights[0].files:
        np.testing.assert_allclose(weights[0][name], weights[1][name], rtol=0, atol=1e-6)
    assert "batch setting 1 from commit" in result.stdout + result.stderr
