"""Job physics: measured rows come back exactly, unmeasured ones are interpolated as documented."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from submarine_elastic import env
from submarine_elastic.sim import TraceCatalog, TraceDataError, UnknownApplicationError

from ._sim_toy import write_toy_data

DATA = env.settings().pollux_data_directory()


@pytest.fixture(scope="module")
def catalog() -> TraceCatalog:
    return TraceCatalog(DATA)


def rows(app: str, name: str) -> list[dict[str, str]]:
    with open(DATA / "traces" / app / name, newline="") as fh:
        return list(csv.DictReader(fh))


def test_catalog_lists_the_six_applications(catalog: TraceCatalog):
    assert catalog.names() == ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
    with pytest.raises(UnknownApplicationError, match="unknown application 'resnet'; known: bert, cifar10"):
        catalog.get("resnet")


def test_measured_placement_returns_the_measured_row(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    for row in rows("cifar10", "placements.csv")[::97]:
        placement = tuple(int(c) for c in row["placement"])
        step, sync = app.step_time(placement, float(row["local_bsz"]))
        assert step == pytest.approx(float(row["step_time"]))
        assert sync == pytest.approx(float(row["sync_time"]))


def test_rotations_of_a_placement_are_the_same_measurement(catalog: TraceCatalog):
    app = catalog.get("imagenet")
    assert app.step_time((4, 2, 1), 40) == app.step_time((1, 4, 2), 40) == app.step_time((2, 1, 4), 40)


def test_local_batch_between_measurements_is_interpolated_linearly(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    lo, hi = app.step_time((4,), 64), app.step_time((4,), 91)
    mid = app.step_time((4,), 77.5)
    assert mid[0] == pytest.approx((lo[0] + hi[0]) / 2)
    assert mid[1] == pytest.approx((lo[1] + hi[1]) / 2)


def test_large_jobs_use_the_scalability_rows(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    assert app.step_time((4,) * 6, 64) == pytest.approx((0.19698505401611327, 0.1378461715698242))
    # 7 nodes x 4 = 28 replicas: halfway between 6 nodes (28 replicas clamped to the 24 measured there)
    # and 8 nodes (between its 24- and 28-replica curves, here measured exactly at 28)
    seven = app.step_time((4,) * 7, 64)
    six, eight = app._at_nodes(6, 28, 64), app._at_nodes(8, 28, 64)
    assert six == app.step_time((4,) * 6, 64)
    assert seven[0] == pytest.approx((six[0] + eight[0]) / 2)


def test_out_of_range_values_are_clamped(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    assert app.step_time((4,), 1) == app.step_time((4,), app.min_local_bsz)
    assert app.step_time((4,) * 40, 64) == app.step_time((4,) * 16, 64)  # more than 16 nodes
    assert app.step_time((8,), 64) == app.step_time((4,), 64)  # 8 GPUs on a node: the 4-GPU measurement
    with pytest.raises(ValueError, match="placement"):
        app.step_time((), 64)


def test_large_local_batches_accumulate_gradients(catalog: TraceCatalog):
    app = catalog.get("cifar10")  # largest measured local batch: 1024
    cost = app.iteration((1,), 4096)
    step, sync = app.step_time((1,), 1024)
    assert (cost.accum_steps, cost.atomic_bsz) == (3, 1024)
    assert cost.seconds == pytest.approx(step + 3 * (step - sync))


def test_gain_is_one_at_the_initial_batch_and_at_most_the_scale(catalog: TraceCatalog):
    for name in catalog.names():
        app = catalog.get(name)
        assert np.allclose(app.gains(app.init_batch_size), 1.0)
        for batch in app.batch_sizes[1:]:
            gains = app.gains(batch)
            scale = batch / app.init_batch_size
            assert np.all(gains >= 1.0 - 1e-9) and np.all(gains <= scale + 1e-9)


def test_gain_matches_the_noise_scale_form(catalog: TraceCatalog):
    app = catalog.get("imagenet")
    batch, epoch = 3200, 10
    noise = app.noise_scale(batch, epoch)
    assert noise is not None
    b0 = app.init_batch_size
    expected = (1 + noise / b0) / (1 + noise / batch)
    assert app.gains(batch)[epoch] == pytest.approx(expected)
    assert app.efficiency(batch, epoch) == pytest.approx(expected / (batch / b0))


def test_gain_between_validated_batches_uses_interpolated_statistics(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    runs = {b: rows("cifar10", f"validation-{b}.csv") for b in (256, 512)}
    epoch, batch = 5, 384
    sqr = (float(runs[256][epoch]["grad_sqr"]) + float(runs[512][epoch]["grad_sqr"])) / 2
    var = (float(runs[256][epoch]["grad_var"]) + float(runs[512][epoch]["grad_var"])) / 2
    scale = batch / 128
    assert app.gains(batch)[epoch] == pytest.approx((var + sqr) / (var / scale + sqr))


def test_the_noise_scale_at_each_batch_is_that_batchs_own(catalog: TraceCatalog):
    """Read at one batch, then at others (validated, between two, clamped) and again: each epoch's noise scale is
    the one of the statistics read from the traces at that batch, never another batch's."""
    app = catalog.get("cifar10")
    runs = {b: rows("cifar10", f"validation-{b}.csv") for b in app.batch_sizes}
    for batch in (384, 256, 384, 64, 10**6, 512, 384):
        b = min(max(batch, app.batch_sizes[0]), app.batch_sizes[-1])
        low = max(s for s in app.batch_sizes if s <= b)
        high = min(s for s in app.batch_sizes if s >= b)
        w = 0.0 if high == low else (b - low) / (high - low)
        for epoch in (0, 5):

            def stat(name: str, epoch: int = epoch, low: int = low, high: int = high, w: float = w) -> float:
                return float(runs[low][epoch][name]) + w * (
                    float(runs[high][epoch][name]) - float(runs[low][epoch][name])
                )

            expected = app.init_batch_size * stat("grad_var") / stat("grad_sqr")
            assert app.noise_scale(batch, epoch) == pytest.approx(expected, rel=1e-9)


def test_completion_target_is_the_smallest_final_progress(catalog: TraceCatalog):
    app = catalog.get("cifar10")
    finals = [float(rows("cifar10", f"validation-{b}.csv")[-1]["progress"]) for b in app.batch_sizes]
    assert app.epochs == 100
    assert app.target_progress == pytest.approx(min(finals))
    assert catalog.get("bert").epochs == 2
    assert catalog.get("cifar10").metric_higher_is_better
    assert not catalog.get("deepspeech2").metric_higher_is_better  # word error rate


def test_malformed_traces_name_the_file_and_line(tmp_path: Path):
    root = write_toy_data(tmp_path)
    placements = root / "traces" / "toy" / "placements.csv"
    placements.write_text("placement,local_bsz,step_time,sync_time\n1,1,fast,0\n")
    with pytest.raises(TraceDataError, match=r"placements\.csv line 2: step_time must be a number, got 'fast'"):
        TraceCatalog(root).get("toy")
    placements.write_text("placement,local_bsz,step_time\n1,1,1\n")
    with pytest.raises(TraceDataError, match=r"placements\.csv: missing column\(s\) sync_time"):
        TraceCatalog(root).get("toy")


def test_missing_traces_folder_says_how_to_point_at_the_data(tmp_path: Path):
    with pytest.raises(TraceDataError, match="SUBMARINE_POLLUX_DATA"):
        TraceCatalog(tmp_path).names()
