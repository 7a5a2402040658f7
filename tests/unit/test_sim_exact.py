"""One goodput+goodput run pinned: the simulator and the goodput policy cache much of their work between rounds
(views, snapshots, models, packings), and every cache must give the very results a run without it gives.

The figures are those of the run before those caches. A deliberate change of the simulator's physics, its events
or the goodput policy changes them: print the new ones with ``{j.name: j.completion_s for j in result.jobs}`` and
say why in the commit. Completion times are compared to 1e-9 relative (a decision changed moves them by seconds;
another CPU's last bit of a float should not fail the test)."""

from __future__ import annotations

import pytest

from submarine_elastic import env
from submarine_elastic.sim import ClusterConfig, load_scheduler, load_workload, simulate
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals

COMPLETIONS = {
    "cifar10-0": 695.9593704076403,
    "ncf-2": 188.98078589154971,
    "ncf-5": 216.28078589154973,
    "ncf-6": 224.58078589154968,
    "ncf-8": 275.0807858915497,
    "ncf-18": 411.6807858915497,
    "ncf-26": 526.1807858915497,
    "yolov3-28": 14588.13360915972,
    "ncf-32": 610.6807858915497,
    "cifar10-36": 1519.1863413049655,
    "cifar10-55": 4392.835661248853,
    "ncf-57": 1488.9807858915499,
    "cifar10-58": 3922.0664852505715,
    "ncf-60": 1543.18078589155,
    "cifar10-67": 4130.796756756051,
    "deepspeech2-70": 10424.171942199879,
    "deepspeech2-84": 11641.809895600938,
    "cifar10-100": 5133.246673636882,
    "deepspeech2-102": 11018.394093860872,
    "cifar10-111": 5671.704154914717,
    "bert-113": 9851.546337338285,
    "deepspeech2-117": 9881.44137026758,
    "bert-118": 8555.588643351788,
    "cifar10-123": 5622.563687493993,
    "cifar10-127": 5595.504027034618,
    "cifar10-129": 5737.736251371404,
    "ncf-138": 2431.1807858915495,
    "cifar10-147": 5501.801564610092,
    "cifar10-148": 6293.235008505841,
    "ncf-151": 4163.8775426476,
}


def test_a_goodput_run_keeps_every_jobs_completion_time():
    """30 jobs of workload-2 (no imagenet) arriving 10x faster on 4x4 GPUs: 302 rounds, 73 resizes, 9 moves."""
    data = env.settings().pollux_data_directory()
    jobs = [j for j in load_workload(data / "workloads" / "workload-2.csv") if j.application != "imagenet"]
    jobs = scale_arrivals(sample_jobs(jobs, 30, seed=1), 0.1)
    result = simulate(jobs, ClusterConfig(4, 4), load_scheduler("goodput+goodput"))
    summary = result.summary
    assert (summary.rounds, summary.resizes, summary.moves) == (302, 73, 9)
    assert {j.name: j.completion_s for j in result.jobs} == pytest.approx(COMPLETIONS, rel=1e-9)
