"""Emulated accelerators: a step is held for the measured GPU profile's time of its batch and placement."""

from __future__ import annotations

import csv

import pytest

from submarine_elastic import env
from submarine_elastic.sim import TraceCatalog
from tf_hooks.emulate import EmulatedAccelerator, EmulationError, placement_of


class FakeClock:
    """A clock the step's work and the hold move forward."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def accelerator(nodes: list[str], clock: FakeClock, app: str = "cifar10") -> tuple[EmulatedAccelerator, list[int]]:
    gathers: list[int] = []

    def gather(_node: str) -> list[str]:
        gathers.append(1)
        return nodes

    return EmulatedAccelerator(app, gather=gather, node=nodes[0], clock=clock, sleep=clock.sleep), gathers


def test_a_step_is_held_for_the_measured_row_of_its_placement_and_local_batch():
    with open(env.settings().pollux_data_directory() / "traces" / "cifar10" / "placements.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["placement"] == "22" and r["local_bsz"] == "64")
    clock = FakeClock()
    device, _ = accelerator(["nm-a", "nm-b", "nm-a", "nm-b"], clock)
    started = clock()
    clock.now += 0.01  # the real math and allreduce took 10 ms
    held = device.hold(started, global_batch=4 * 64)
    assert held == pytest.approx(float(row["step_time"]))
    assert clock.now - started == pytest.approx(float(row["step_time"]))
    assert clock.slept == [pytest.approx(float(row["step_time"]) - 0.01)]
    assert device.stats.steps == 1 and device.stats.overruns == 0


def test_more_workers_hold_a_fixed_global_batch_for_less_time():
    # What makes data parallelism pay on a CPU machine: the profile's step at B/k per GPU.
    clock = FakeClock()
    one, _ = accelerator(["n0"], clock)
    four, _ = accelerator(["n0"] * 4, clock)
    assert four.device_seconds(four.placement(), 1024) < one.device_seconds(one.placement(), 1024) / 2


def test_placement_is_gathered_once_a_ring_and_again_after_a_reset():
    clock = FakeClock()
    device, gathers = accelerator(["a", "b", "a"], clock)
    for _ in range(5):
        device.hold(clock(), 96)
    assert gathers == [1]
    assert device.placement() == (2, 1)
    device.reset()
    device.hold(clock(), 96)
    assert gathers == [1, 1]


def test_micro_batches_add_their_compute_without_a_sync():
    clock = FakeClock()
    device, _ = accelerator(["n0", "n0"], clock)
    app = TraceCatalog().get("cifar10")
    step, sync = app.step_time((2,), 128)
    assert device.device_seconds((2,), 512, micro_batches=2) == pytest.approx(step + (step - sync))


def test_a_step_slower_than_the_device_is_not_held_and_is_counted():
    clock = FakeClock()
    device, _ = accelerator(["n0"], clock, app="ncf")
    started = clock()
    clock.now += 5.0
    device.hold(started, 1024)
    assert clock.slept == [] and device.stats.overruns == 1
    assert "1 steps outran it" in device.stats.summary() and "emulated" in device.stats.summary()


def test_unknown_profile_is_refused_naming_the_known_ones():
    with pytest.raises(EmulationError, match="no GPU profile 'resnet9'.*cifar10"):
        EmulatedAccelerator("resnet9", gather=lambda n: [n], node="x")


def test_a_container_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NM_HOST", "127.0.0.1")
    monkeypatch.setenv("NM_PORT", "18100")
    monkeypatch.delenv("SUBMARINE_WORKER_GPUS", raising=False)
    with pytest.raises(EmulationError, match="holds no GPU.*gpu=1"):
        EmulatedAccelerator.for_job("cifar10")
    monkeypatch.setenv("SUBMARINE_WORKER_GPUS", "1")
    assert EmulatedAccelerator.for_job("cifar10", gather=lambda n: [n]).application == "cifar10"


def test_placement_counts_ranks_per_node_most_first():
    assert placement_of(["b", "a", "b", "c", "b"]) == (3, 1, 1)
    with pytest.raises(ValueError):
        placement_of([])


def test_a_local_batch_the_device_cannot_hold_is_charged_as_the_simulator_charges_it():
    # bert's largest measured per-GPU batch is below 384 / 6: the simulator runs it in micro-batches.
    clock = FakeClock()
    device, _ = accelerator(["n0"] * 4 + ["n1"] * 2, clock, app="bert")
    app = TraceCatalog().get("bert")
    assert 384 / 6 > app.max_local_bsz
    assert device.device_seconds((4, 2), 384) == pytest.approx(app.iteration((4, 2), 384).seconds)
    for placement, batch in [((1,), 128), ((4,), 64), ((2, 2), 256)]:  # within its validated batches
        assert device.device_seconds(placement, batch) == pytest.approx(app.iteration(placement, batch).seconds)
