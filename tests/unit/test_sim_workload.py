"""Workload files: the Pollux format, and a clear error naming the row for every kind of bad input."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from submarine_elastic import env
from submarine_elastic.sim import JobSpec, WorkloadError, load_workload, parse_workload, resolve_workload
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals, write_workload

APPS = ("bert", "cifar10", "ncf")
HEADER = "name,time,application,num_replicas,batch_size\n"


def parse(text: str) -> list[JobSpec]:
    return parse_workload(io.StringIO(text), source="w.csv", applications=APPS)


def test_parses_rows_sorted_by_arrival():
    jobs = parse(HEADER + "b,20,ncf,1,256\na,10.5,cifar10,4,512\n\nc,20,bert,2,24\n")
    assert [(j.name, j.arrival_s) for j in jobs] == [("a", 10.5), ("b", 20.0), ("c", 20.0)]
    assert jobs[0] == JobSpec("a", 10.5, "cifar10", 4, 512)


def test_optional_limits_are_read():
    (job,) = parse("name,time,application,num_replicas,batch_size,min_replicas,max_replicas\na,0,ncf,2,64,1,8\n")
    assert (job.min_replicas, job.max_replicas) == (1, 8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,time,application,batch_size\na,0,ncf,64\n", r"w\.csv line 1: missing column\(s\) num_replicas"),
        (HEADER + "a,0,ncf,1,64\nb,5,resnet,1,64\n", r"w\.csv line 3 \(job 'b'\): unknown application 'resnet'"),
        (HEADER + "a,-3,ncf,1,64\n", r"line 2 \(job 'a'\): time must be >= 0 seconds, got -3"),
        (HEADER + "a,soon,ncf,1,64\n", r"line 2 \(job 'a'\): time must be a number, got 'soon'"),
        (HEADER + "a,0,ncf,1.5,64\n", r"line 2 \(job 'a'\): num_replicas must be a positive integer, got '1.5'"),
        (HEADER + "a,0,ncf,0,64\n", r"num_replicas must be a positive integer, got '0'"),
        (HEADER + "a,0,ncf,1,\n", r"line 2 \(job 'a'\): batch_size must be a positive integer, got ''"),
        (HEADER + "a,0,ncf,1,64\na,1,ncf,1,64\n", r"line 3 \(job 'a'\): duplicate job name \(first on line 2\)"),
        (HEADER + ",0,ncf,1,64\n", r"line 2: empty job name"),
        (HEADER + "a,0,ncf,1,64,9\n", r"line 2 \(job 'a'\): more fields than the header"),
        (HEADER, r"no jobs"),
        ("", r"empty file"),
        (
            "name,time,application,num_replicas,batch_size,max_replicas\na,0,ncf,4,64,2\n",
            r"line 2 \(job 'a'\): .*num_replicas 4 is outside",
        ),
    ],
)
def test_bad_rows_name_the_file_line_and_job(text: str, message: str):
    with pytest.raises(WorkloadError, match=message):
        parse(text)


def test_error_carries_the_line_and_job():
    with pytest.raises(WorkloadError) as info:
        parse(HEADER + "a,0,ncf,1,64\nb,-1,ncf,1,64\n")
    assert (info.value.source, info.value.line, info.value.job) == ("w.csv", 3, "b")


@given(st.text(max_size=12))
def test_any_time_text_gives_a_number_or_a_workload_error(text: str):
    clean = text.replace(",", "").replace("\n", "").replace("\r", "").replace('"', "")
    try:
        jobs = parse(HEADER + f"a,{clean},ncf,1,64\n")
    except WorkloadError as exc:
        assert exc.line == 2
    else:
        assert jobs[0].arrival_s >= 0


def test_unreadable_file_is_a_workload_error(tmp_path: Path):
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "nope.csv")


def test_write_then_load_round_trips(tmp_path: Path):
    jobs = [JobSpec("a", 0, "ncf", 2, 64, max_replicas=8), JobSpec("b", 1.5, "bert", 1, 12)]
    write_workload(jobs, tmp_path / "w.csv")
    assert load_workload(tmp_path / "w.csv", APPS) == jobs


def test_names_resolve_in_the_shared_data(tmp_path: Path):
    base = tmp_path / "data"
    (base / "workloads").mkdir(parents=True)
    (base / "workloads-realistic").mkdir()
    (base / "workloads" / "workload-1.csv").write_text(HEADER)
    (base / "workloads-realistic" / "workload-1.csv").write_text(HEADER)
    assert resolve_workload("workload-1", base) == base / "workloads" / "workload-1.csv"
    assert resolve_workload("realistic/workload-1.csv", base) == base / "workloads-realistic" / "workload-1.csv"
    with pytest.raises(WorkloadError, match="workload-9"):
        resolve_workload("workload-9", base)


def test_the_shipped_pollux_workloads_all_parse():
    data = env.settings().pollux_data_directory()
    apps = sorted(p.name for p in (data / "traces").iterdir() if p.is_dir())
    for folder in ("workloads", "workloads-realistic"):
        for n in range(1, 5):
            jobs = load_workload(data / folder / f"workload-{n}.csv", apps)
            assert len(jobs) == 160


def test_env_override_of_the_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SUBMARINE_POLLUX_DATA", str(tmp_path))
    assert env.settings().pollux_data_directory() == tmp_path
    monkeypatch.delenv("SUBMARINE_POLLUX_DATA")
    assert (env.settings().pollux_data_directory() / "LICENSE").is_file()  # the copy the package ships
    assert env.settings().pollux_data_directory().parts[-3:] == ("sim", "data", "pollux")


def test_sampling_and_arrival_scaling_are_deterministic():
    jobs = [JobSpec(f"j{i}", float(i * 10), "ncf", 1, 64) for i in range(20)]
    assert sample_jobs(jobs, 5, seed=3) == sample_jobs(jobs, 5, seed=3)
    assert sample_jobs(jobs, 5, seed=3) != sample_jobs(jobs, 5, seed=4)
    assert [j.arrival_s for j in scale_arrivals(jobs[:3], 0.5)] == [0.0, 5.0, 10.0]
    with pytest.raises(ValueError, match="count must be in 1..20, got 0"):
        sample_jobs(jobs, 0, seed=1)
    with pytest.raises(ValueError, match="factor must be > 0, got -1"):
        scale_arrivals(jobs, -1)
