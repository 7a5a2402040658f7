"""Design-space exploration: spaces, sampling, resumable runs, the report's arithmetic, and the CLI."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.dse import (
    Backend,
    BackendError,
    CommandBackend,
    Point,
    ResultsError,
    SpaceError,
    Strategy,
    analyse,
    parse_space,
    read_results,
    run_space,
    sample_points,
    write_report,
)
from submarine_elastic.dse.api import Parameter, Space

from ._sim_toy import TOY, write_toy_data

# --- spaces and sampling ------------------------------------------------------------------------------


def test_space_discretises_ranges_and_counts_the_factorial():
    space = parse_space(
        {
            "name": "s",
            "parameters": {
                "policy": ["fifo", "greedy"],
                "cost": {"range": [0, 30], "steps": 4},
                "workers": {"range": [1, 8], "steps": 4, "log": True, "integer": True},
            },
            "fixed": {"cluster": "4x4"},
        }
    )
    levels = {p.name: p.levels for p in space.parameters}
    assert levels == {"policy": ("fifo", "greedy"), "cost": (0.0, 10.0, 20.0, 30.0), "workers": (1, 2, 4, 8)}
    assert space.size == 32
    points = sample_points(space)
    assert len(points) == 32 == len({p.point_id for p in points})
    assert points[0].settings() == {"cluster": "4x4", "policy": "fifo", "cost": 0.0, "workers": 1}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "s", "parameters": {"a": [1]}, "colour": 1}, r"colour: Extra inputs are not permitted"),
        ({"name": "s"}, r"parameters: Field required"),
        ({"name": "s", "parameters": {"a": {"range": [5, 1], "steps": 3}}}, r"parameters\.a.*low < high"),
        ({"name": "s", "parameters": {"a": {"range": [0, 1], "steps": 3, "log": True}}}, "log range must be positive"),
        ({"name": "s", "parameters": {"a": [1, 2]}, "sampling": {"strategy": "random"}}, "needs samples >= 1"),
        ({"name": "s", "parameters": {"a": [1, 1.0]}}, "repeats a level"),
        ({"name": "s", "parameters": {"a": [1]}, "fixed": {"a": 2}}, "a is both a parameter and fixed"),
        ({"name": "s", "parameters": {}}, "has no parameters"),
    ],
)
def test_bad_spaces_name_the_key(data: dict, message: str):
    with pytest.raises(SpaceError, match=message):
        parse_space(data, "space.yaml")


def _space(strategy: Strategy, samples: int | None, seed: int = 1) -> Space:
    params = (Parameter("a", (1, 2, 3, 4)), Parameter("b", ("x", "y", "z", "w")), Parameter("c", (0.1, 0.2)))
    return Space("s", params, strategy=strategy, samples=samples, seed=seed)


def test_random_and_lhs_sampling_are_deterministic_for_a_seed():
    for strategy in (Strategy.RANDOM, Strategy.LHS):
        first = [p.point_id for p in sample_points(_space(strategy, 8, seed=1))]
        assert first == [p.point_id for p in sample_points(_space(strategy, 8, seed=1))]
        assert first != [p.point_id for p in sample_points(_space(strategy, 8, seed=2))]


def test_latin_hypercube_covers_every_level_evenly():
    points = sample_points(_space(Strategy.LHS, 8))
    assert len(points) == 8  # no two configurations alike here
    for name, levels in (("a", (1, 2, 3, 4)), ("b", ("x", "y", "z", "w")), ("c", (0.1, 0.2))):
        counts = {lv: sum(p.values[name] == lv for p in points) for lv in levels}
        assert set(counts.values()) == {8 // len(levels)}, (name, counts)


def test_point_ids_are_stable_and_ignore_int_float_spelling():
    assert Point({"a": 1, "b": "x"}).point_id == Point({"b": "x", "a": 1.0}).point_id
    assert Point({"a": True}).point_id != Point({"a": 1}).point_id


# --- the report's arithmetic ---------------------------------------------------------------------------


def _rows(table: list[tuple[dict[str, object], float]], status: str = "ok") -> list[dict[str, str]]:
    return [
        {"point_id": f"p{i}", "status": status, **{k: str(v) for k, v in values.items()}, "jct": str(y)}
        for i, (values, y) in enumerate(table)
    ]


def test_main_effects_and_interaction_match_a_hand_built_table():
    record = {"name": "hand", "parameters": {"a": [1, 2], "b": ["x", "y"]}, "objective": "jct", "minimize": True}
    rows = _rows(
        [({"a": 1, "b": "x"}, 10), ({"a": 1, "b": "y"}, 20), ({"a": 2, "b": "x"}, 30), ({"a": 2, "b": "y"}, 60)]
    )
    result = analyse(record, rows)
    effects = {e.parameter: {lv.level: (lv.mean, lv.count) for lv in e.levels} for e in result.main_effects}
    assert effects == {"a": {1: (15.0, 2), 2: (45.0, 2)}, "b": {"x": (20.0, 2), "y": (40.0, 2)}}
    assert [e.parameter for e in result.main_effects] == ["a", "b"]  # largest spread first: 30 vs 20
    assert result.main_effects[0].best.level == 1
    assert result.grand_mean == 30
    (x,) = result.interactions
    # residuals cell - row - column + grand: +5, -5, -5, +5
    assert x.strength == pytest.approx(5.0)
    assert result.best[0]["a"] == 1 and result.best[0]["b"] == "x" and result.best[0]["jct"] == 10
    additive = _rows(
        [({"a": 1, "b": "x"}, 10), ({"a": 1, "b": "y"}, 30), ({"a": 2, "b": "x"}, 40), ({"a": 2, "b": "y"}, 60)]
    )
    assert analyse(record, additive).interactions[0].strength == pytest.approx(0.0)


def test_maximising_picks_the_highest_and_failed_rows_are_left_out():
    record = {"name": "m", "parameters": {"a": [1, 2]}, "objective": "jct", "minimize": False}
    rows = _rows([({"a": 1}, 5), ({"a": 2}, 7)]) + _rows([({"a": 2}, 1000)], status="failed")
    result = analyse(record, rows)
    assert result.main_effects[0].best.level == 2
    assert (result.measured, result.failed) == (2, 1)


def test_correlation_across_workloads():
    record = {
        "name": "c",
        "parameters": {"workload": ["w1", "w2", "w3"], "c": [1, 2, 3]},
        "objective": "jct",
        "minimize": True,
    }
    table = []
    for c, (y1, y2, y3) in zip((1, 2, 3), ((1, 2, 3), (2, 4, 2), (3, 6, 1)), strict=True):
        table += [({"workload": "w1", "c": c}, y1), ({"workload": "w2", "c": c}, y2), ({"workload": "w3", "c": c}, y3)]
    result = analyse(record, _rows(table))
    corr = result.correlation
    assert corr is not None and corr.across == "workload" and corr.matched == 3
    assert result.lead is not None and result.lead.parameter == "c"  # the workload is context, not a knob
    assert {lv: row["c"] for lv, row in result.best_per.items()} == {"w1": 1, "w2": 1, "w3": 3}
    assert corr.matrix[0][1] == pytest.approx(1.0)
    assert corr.matrix[0][2] == pytest.approx(-1.0)
    with pytest.raises(ResultsError, match="not a parameter"):
        analyse(record, _rows(table), across="model")


def test_report_files_are_written(tmp_path: Path):
    record = {"name": "hand", "parameters": {"a": [1, 2], "b": ["x", "y"]}, "objective": "jct", "minimize": True}
    rows = _rows(
        [({"a": 1, "b": "x"}, 10), ({"a": 1, "b": "y"}, 20), ({"a": 2, "b": "x"}, 30), ({"a": 2, "b": "y"}, 60)]
    )
    paths = write_report(analyse(record, rows), tmp_path)
    text = paths["report"].read_text()
    assert "**a** matters most: jct averages 15 at a=1 against 45 at a=2" in text
    assert "| 1 | 10 | 20 |" in text  # the a x b table
    assert paths["main_effects"].stat().st_size > 0 and paths["interactions"].stat().st_size > 0


def test_no_measured_point_is_a_clear_error():
    record = {"name": "e", "parameters": {"a": [1]}, "objective": "jct", "minimize": True}
    with pytest.raises(ResultsError, match="no point of space 'e' was measured ok with 'jct'"):
        analyse(record, _rows([({"a": 1}, 1)], status="failed"))


# --- resumable runs --------------------------------------------------------------------------------------


class Logging(Backend):
    """Appends each measured point id to a file; interrupts (Ctrl-C) on call number ``stop_at``."""

    name = "logging"

    def __init__(self, log: Path, stop_at: int | None = None, fail: str | None = None) -> None:
        self.log = log
        self.stop_at = stop_at
        self.fail = fail

    def parameters(self) -> None:
        return None

    def metrics(self) -> tuple[str, ...]:
        return ("score",)

    def measure(self, point: Point) -> dict[str, float]:
        calls = self.log.read_text().split() if self.log.exists() else []
        if self.stop_at is not None and len(calls) + 1 >= self.stop_at:
            raise KeyboardInterrupt
        with open(self.log, "a") as fh:
            fh.write(point.point_id + "\n")
        if self.fail is not None and point.values.get("a") == self.fail:
            raise BackendError(f"point {point.point_id}: told to fail")
        return {"score": float(sum(hash(str(v)) % 7 for v in point.values.values()))}


def _small() -> Space:
    return Space("small", (Parameter("a", ("p", "q", "r")), Parameter("b", (1, 2))), fixed={"cluster": "1x4"})


def test_an_interrupted_run_resumes_and_measures_each_point_once(tmp_path: Path):
    space, log, out = _small(), tmp_path / "calls", tmp_path / "out"
    points = sample_points(space)
    with pytest.raises(KeyboardInterrupt):
        run_space(space, Logging(log, stop_at=3), points, out)
    assert len(log.read_text().split()) == 2
    summary = run_space(space, Logging(log), points, out)
    assert (summary.total, summary.skipped, summary.measured, summary.failed) == (6, 2, 4, 0)
    calls = log.read_text().split()
    assert sorted(calls) == sorted(p.point_id for p in points)  # every point exactly once
    again = run_space(space, Logging(log), points, out)
    assert (again.measured, again.skipped) == (0, 6)
    record, rows = read_results(out)
    assert record["name"] == "small" and len(rows) == 6


def test_parallel_run_measures_each_point_once(tmp_path: Path):
    space, log, out = _small(), tmp_path / "calls", tmp_path / "out"
    points = sample_points(space)
    summary = run_space(space, Logging(log), points, out, parallel=2)
    assert summary.measured == 6
    assert sorted(log.read_text().split()) == sorted(p.point_id for p in points)
    with open(out / "results.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 6


def test_failed_points_are_recorded_and_tried_again(tmp_path: Path):
    space, log, out = _small(), tmp_path / "calls", tmp_path / "out"
    points = sample_points(space)
    first = run_space(space, Logging(log, fail="q"), points, out)
    assert first.failed == 2
    second = run_space(space, Logging(log), points, out)
    assert (second.measured, second.failed) == (2, 0)
    _, rows = read_results(out)
    assert all(r["status"] == "ok" for r in rows)


def test_results_of_another_space_are_refused(tmp_path: Path):
    out = tmp_path / "out"
    run_space(_small(), Logging(tmp_path / "calls"), sample_points(_small()), out)
    other = Space("small", (Parameter("a", ("p", "q", "r")), Parameter("b", (1, 2))), fixed={"cluster": "2x4"})
    with pytest.raises(ResultsError, match="measured with fixed"):
        run_space(other, Logging(tmp_path / "calls"), sample_points(other), out)
    renamed = Space("small", (Parameter("z", ("p",)),))
    with pytest.raises(ResultsError, match="has columns"):
        run_space(renamed, Logging(tmp_path / "calls"), sample_points(renamed), out)


# --- backends ------------------------------------------------------------------------------------------


def test_command_backend_times_the_command_and_reads_its_json(tmp_path: Path):
    script = "import json, sys; print('working'); print(json.dumps(dict(loss=float(sys.argv[1]) / 2, note='x')))"
    backend = CommandBackend(f"{sys.executable} -c {json.dumps(script)} {{workers}}", metric_names=("wall_s", "loss"))
    metrics = backend.measure(Point({"workers": 3}))
    assert metrics["loss"] == 1.5 and metrics["wall_s"] > 0 and "note" not in metrics
    with pytest.raises(BackendError, match=r"uses \{batch\}, which is not set"):
        CommandBackend("echo {batch}").measure(Point({"workers": 1}))
    with pytest.raises(BackendError, match="exited 3: boom"):
        CommandBackend(f"{sys.executable} -c \"import sys; print('boom', file=sys.stderr); sys.exit(3)\"").measure(
            Point({})
        )
    with pytest.raises(BackendError, match="cannot run 'no-such-binary-here'"):
        CommandBackend("no-such-binary-here").measure(Point({}))


def test_unknown_simulator_settings_are_refused_before_running(tmp_path: Path):
    from submarine_elastic.dse import SimulatorBackend

    space = Space("s", (Parameter("colour", ("red",)),))
    with pytest.raises(BackendError, match="has no setting colour"):
        run_space(space, SimulatorBackend(), sample_points(space), tmp_path)


def test_a_small_space_on_the_simulator_end_to_end(tmp_path: Path):
    data = write_toy_data(tmp_path / "data")
    workload = tmp_path / "w.csv"
    workload.write_text(
        "name,time,application,num_replicas,batch_size\n" + "".join(f"j{i},{i * 5},{TOY},2,2\n" for i in range(6))
    )
    space_file = tmp_path / "space.yaml"
    space_file.write_text(
        f"""
name: toy-sweep
objective: mean_jct_s
fixed:
  data: {data}
  workload: {workload}
  cluster: 1x4
  start_cost_s: 0
  scale_out_cost_s: 0
parameters:
  policy: [fifo, greedy+fair-share]
  workers: [1, 2, 4]
"""
    )
    out = tmp_path / "results"
    runner = CliRunner()
    result = runner.invoke(cli, ["dse", "run", str(space_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "6 points: 6 measured now, 0 already measured, 0 failed" in result.output
    _, rows = read_results(out)
    jct = {(r["policy"], r["workers"]): float(r["mean_jct_s"]) for r in rows}
    # one job alone with 4 workers at one example each: 25 s; six of them, one after another under FIFO
    assert jct["fifo", "4"] == pytest.approx(sum(25 * (i + 1) - 5 * i for i in range(6)) / 6)
    assert (out / "report.md").exists() and (out / "main_effects.png").exists()
    again = runner.invoke(cli, ["dse", "run", str(space_file), "--out", str(out), "--no-report"])
    assert "0 measured now, 6 already measured" in again.output
    report = runner.invoke(cli, ["dse", "report", str(out), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    assert "matters most" in report.output and (tmp_path / "rep" / "report.md").exists()


def test_dse_cli_errors_are_clear(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nparameters: {policy: [fifo]}\nsampling: {strategy: sobol}\n")
    result = CliRunner().invoke(cli, ["dse", "run", str(bad)])
    assert result.exit_code == 1 and "sampling.strategy" in result.output
    result = CliRunner().invoke(cli, ["dse", "report", str(tmp_path)])
    assert result.exit_code == 1 and "holds no results" in result.output


def test_the_example_spaces_load():
    from submarine_elastic.dse import load_space, make_backend

    examples = sorted((Path(__file__).resolve().parents[2] / "examples" / "dse").glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        space = load_space(path)
        make_backend(space.backend, dict(space.backend_options))
        assert sample_points(space)
