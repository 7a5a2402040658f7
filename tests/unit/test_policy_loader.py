"""Loading policies by entry-point name and by module:Class, and the errors that name what was wrong."""

from __future__ import annotations

import configparser
import sys
from importlib.metadata import EntryPoint, EntryPoints
from pathlib import Path

import pytest

from submarine_elastic.policy import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    CompositePolicy,
    ConvergencePolicy,
    Decision,
    FairShareArbiter,
    GoodputArbiter,
    JobPolicy,
    JobView,
    NotAPolicyError,
    PolicyAttributeError,
    PolicyConfigError,
    PolicyLoadError,
    PolicyNotFoundError,
    ScalingEfficiencyPolicy,
    Snapshot,
    StragglerPolicy,
    UtilityPolicy,
    load_arbiter,
    load_job_policy,
    load_policy,
    load_policy_class,
    policy_names,
)
from submarine_elastic.policy import loader as loader_module

ROOT = Path(__file__).resolve().parents[2]


class HalfPolicy(JobPolicy):
    """A user policy defined outside the package."""

    def __init__(self, share: float = 0.5) -> None:
        self.share = share

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        return Decision(job.job_id, max(job.min_workers, int(job.max_workers * self.share)), "half")


NOT_A_CLASS = 42


def test_setup_cfg_registers_exactly_the_builtins() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = [line.strip() for line in config["options.entry_points"][ENTRY_POINT_GROUP].splitlines() if line.strip()]
    registered = dict(line.replace(" ", "").split("=", 1) for line in lines)
    assert registered == BUILTIN_POLICIES
    assert config["options.entry_points"]["console_scripts"].strip() == "submarine = submarine_elastic.cli.main:main"


def test_builtins_load_even_without_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout whose metadata is stale (or not installed) still knows the built-ins."""
    monkeypatch.setattr(loader_module, "entry_points", lambda **kw: EntryPoints([]))
    assert policy_names() == sorted(BUILTIN_POLICIES)
    assert load_policy_class("goodput") is GoodputArbiter


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("scaling-efficiency", ScalingEfficiencyPolicy),
        ("straggler", StragglerPolicy),
        ("convergence", ConvergencePolicy),
        ("fair-share", FairShareArbiter),
        ("goodput", GoodputArbiter),
        (" goodput ", GoodputArbiter),
    ],
)
def test_builtins_load_by_name(name: str, cls: type) -> None:
    assert load_policy_class(name) is cls
    assert type(load_policy(name)) is cls


def test_options_go_to_the_constructor() -> None:
    policy = load_job_policy("utility", price_per_worker_hour=2.0, value_per_sample=0.01)
    assert isinstance(policy, UtilityPolicy) and policy.price_per_worker_hour == 2.0
    composite = load_job_policy("composite", policies=["convergence", "straggler"])
    assert isinstance(composite, CompositePolicy)
    assert [type(p) for p in composite.policies] == [ConvergencePolicy, StragglerPolicy]


def test_a_user_policy_loads_by_module_and_class() -> None:
    policy = load_job_policy(f"{__name__}:HalfPolicy", share=0.25)
    assert isinstance(policy, HalfPolicy) and policy.share == 0.25


def test_a_user_entry_point_loads_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = EntryPoints([EntryPoint("half", f"{__name__}:HalfPolicy", ENTRY_POINT_GROUP)])
    monkeypatch.setattr(loader_module, "entry_points", lambda **kw: fake.select(**kw))
    assert load_policy_class("half") is HalfPolicy
    assert "half" in policy_names()


def test_a_name_registered_twice_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = EntryPoints(
        [
            EntryPoint("half", f"{__name__}:HalfPolicy", ENTRY_POINT_GROUP),
            EntryPoint("half", "other_package.policies:Half", ENTRY_POINT_GROUP),
        ]
    )
    monkeypatch.setattr(loader_module, "entry_points", lambda **kw: fake.select(**kw))
    with pytest.raises(PolicyLoadError, match="'half' is registered more than once"):
        load_policy_class("half")


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("no-such-policy", PolicyNotFoundError, "no policy named 'no-such-policy' \\(known: composite, convergence"),
        ("", PolicyNotFoundError, "a policy name or 'module:Class' is needed"),
        ("no_such_module_xyz:Policy", PolicyNotFoundError, "no module named 'no_such_module_xyz'"),
        (
            "submarine_elastic.policy.nope:Policy",
            PolicyNotFoundError,
            "no module named 'submarine_elastic.policy.nope'",
        ),
        (":Policy", PolicyNotFoundError, "expected 'module:Class'"),
        ("submarine_elastic.policy.basic:", PolicyNotFoundError, "expected 'module:Class'"),
        ("submarine_elastic.policy.basic:Nope", PolicyAttributeError, "has no attribute 'Nope'"),
        ("submarine_elastic.policy.api:Snapshot", NotAPolicyError, "is not a JobPolicy or ClusterArbiter subclass"),
        (f"{__name__}:NOT_A_CLASS", NotAPolicyError, "42 is not a JobPolicy"),
        ("submarine_elastic.policy.api:JobPolicy", NotAPolicyError, "JobPolicy is abstract"),
    ],
)
def test_load_errors_name_what_was_wrong(spec: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        load_policy_class(spec)
    assert isinstance(info.value, PolicyLoadError)


def test_a_module_whose_own_import_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_missing_dep.py").write_text("import not_installed_dep_xyz\n")
    (tmp_path / "broken_syntax.py").write_text("def (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyLoadError, match="imports 'not_installed_dep_xyz', which is not installed") as info:
        load_policy_class("needs_missing_dep:Policy")
    assert not isinstance(info.value, PolicyNotFoundError)
    with pytest.raises(PolicyLoadError, match="importing module 'broken_syntax' failed: SyntaxError"):
        load_policy_class("broken_syntax:Policy")
    sys.modules.pop("needs_missing_dep", None)


def test_the_wrong_kind_is_refused() -> None:
    with pytest.raises(NotAPolicyError, match="'fair-share' is a cluster arbiter, not a job policy"):
        load_job_policy("fair-share")
    with pytest.raises(NotAPolicyError, match="'straggler' is a job policy, not a cluster arbiter"):
        load_arbiter("straggler")
    assert isinstance(load_arbiter("fair-share"), FairShareArbiter)


def test_goodput_is_both_a_job_policy_and_an_arbiter() -> None:
    assert isinstance(load_job_policy("goodput"), JobPolicy)
    assert isinstance(load_arbiter("goodput"), GoodputArbiter)


def test_bad_options_are_a_config_error() -> None:
    with pytest.raises(PolicyConfigError, match="'straggler': .*unexpected keyword argument 'windw'"):
        load_policy("straggler", windw=3)
    with pytest.raises(PolicyConfigError, match="window must be an int >= 1, got 0"):
        load_policy("straggler", window=0)
