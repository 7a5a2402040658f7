"""`submarine job run` is flags -> prepare -> submit: prepare checks every flag once, naming it, and chooses no
port, reads no keytab and issues no certificate; the credentials are chosen when the job is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from submarine_elastic.protocol.api import BatchLimits, Limits
from submarine_elastic.submit.api import JobSpecError
from submarine_elastic.submit.jobspec import with_credentials
from submarine_elastic.submit.service import FlagError, JobFlags, batch_limits, prepare

RM = "http://127.0.0.1:18088"


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    monkeypatch.delenv("SUBMARINE_YARN_AUTH", raising=False)
    return tmp_path / "jobs"


class Cluster:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, name: str) -> tuple[str, str | None]:
        self.asked.append(name)
        return RM, None


def flags(**kw: object) -> JobFlags:
    return JobFlags(**{"name": "mnist", "worker_launch_cmd": "python train.py", **kw})  # type: ignore[arg-type]


def test_a_prepared_request_has_the_flags_and_no_credentials_yet(tmp_path: Path) -> None:
    cluster = Cluster()
    req = prepare(flags(elastic=True, num_workers=2, max_workers=4, max_batch_size=256), cluster, cwd=tmp_path)
    assert cluster.asked == ["mnist"]
    assert (req.limits, req.batch_limits, req.rm_url, req.workdir) == (
        Limits(2, 1, 4),
        BatchLimits(1, 256),
        RM,
        tmp_path.resolve(),
    )
    assert (req.driver_port, req.token, req.job_tls, req.yarn_login) == (None, None, None, None)
    assert req.snapshot and not req.insecure


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        ({"min_workers": 1}, "--min_workers"),
        ({"tls_key": Path("k.pem")}, "--tls_cert"),
        ({"insecure": True, "tls_cert": Path("c.pem"), "tls_key": Path("k.pem")}, "--insecure"),
        ({"min_batch_size": 8}, "--min_batch_size"),
        ({"localizations": ("a:b",), "snapshot": False}, "--localization"),
    ],
)
def test_flags_that_contradict_each_other_are_named_before_the_cluster_is_asked(
    tmp_path: Path, given: dict[str, object], flag: str
) -> None:
    cluster = Cluster()
    with pytest.raises(FlagError) as raised:
        prepare(flags(**given), cluster, cwd=tmp_path)
    assert raised.value.flag == flag and cluster.asked == []


def test_a_policy_needs_elastic_and_a_bad_value_is_named(tmp_path: Path) -> None:
    with pytest.raises(FlagError, match="--policy") as raised:
        prepare(flags(policy="goodput"), Cluster(), cwd=tmp_path)
    assert raised.value.flag == "--policy"
    with pytest.raises(JobSpecError, match="--worker_resources"):
        prepare(flags(worker_resources="vcores=1"), Cluster(), cwd=tmp_path)


def test_batch_limits_of_a_minimum_above_the_maximum_are_the_command_lines_error() -> None:
    with pytest.raises(FlagError, match="--min_batch_size 512 is above --max_batch_size 256") as raised:
        batch_limits(512, 256)
    assert raised.value.flag is None


def test_credentials_are_chosen_once_and_kept(tmp_path: Path) -> None:
    req = prepare(flags(), Cluster(), cwd=tmp_path)
    done = with_credentials(req)
    assert done.driver_port is not None and done.token and done.job_tls is not None
    assert with_credentials(done) == done
    plaintext = with_credentials(prepare(flags(insecure=True), Cluster(), cwd=tmp_path))
    assert plaintext.job_tls is None and plaintext.token
