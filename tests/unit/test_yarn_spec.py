"""The YARN service spec models: exact JSON out, and each bad field rejected locally with its path named."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from submarine_elastic.yarn import InvalidSpecError, Service, YarnError
from submarine_elastic.yarn.spec import COMPONENT_NAME_MAX_LENGTH, SERVICE_NAME_MAX_LENGTH


def good_spec() -> dict[str, Any]:
    return {
        "name": "mnist-elastic",
        "version": "1.0.0",
        "queue": "default",
        "lifetime": 3600,
        "configuration": {"properties": {"yarn.service.rolling-log.include-pattern": ".*"}},
        "components": [
            {
                "name": "driver",
                "number_of_containers": 1,
                "launch_command": "python -m driver --service ${SERVICE_NAME}",
                "resource": {"cpus": 1, "memory": "1024"},
                "restart_policy": "NEVER",
                "configuration": {"properties": {"yarn.service.container-state-report-as-service-state": "true"}},
            },
            {
                "name": "worker",
                "number_of_containers": 2,
                "launch_command": "python -m agent ${COMPONENT_INSTANCE_NAME}",
                "resource": {"cpus": 2, "memory": 2048},
                "restart_policy": "ALWAYS",
                "configuration": {"env": {"HOROVOD_GLOO_TIMEOUT_SECONDS": "30"}},
            },
        ],
    }


def rejected(data: dict[str, Any]) -> InvalidSpecError:
    with pytest.raises(InvalidSpecError) as info:
        Service.from_dict(data)
    return info.value


def test_serialises_exactly_the_fields_given_with_memory_as_string() -> None:
    spec = Service.from_dict(good_spec())
    expected = good_spec()
    expected["components"][1]["resource"]["memory"] = "2048"
    assert spec.to_dict() == expected
    assert json.loads(spec.to_json()) == expected


def test_unset_optional_fields_are_left_out_not_sent_as_null() -> None:
    spec = Service.from_dict(
        {
            "name": "a",
            "version": "1",
            "components": [
                {
                    "name": "w",
                    "number_of_containers": 0,
                    "artifact": {"id": "img:1"},
                    "resource": {"cpus": 1, "memory": 64},
                }
            ],
        }
    )
    assert spec.to_dict() == {
        "name": "a",
        "version": "1",
        "components": [
            {
                "name": "w",
                "number_of_containers": 0,
                "artifact": {"id": "img:1"},
                "resource": {"cpus": 1, "memory": "64"},
            }
        ],
    }


def test_from_json_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "svc.json"
    path.write_text(json.dumps(good_spec()), encoding="utf-8")
    spec = Service.from_json_file(path)
    assert spec.name == "mnist-elastic"
    assert [c.name for c in spec.components] == ["driver", "worker"]
    assert spec.component("worker") is not None
    assert spec.component("worker").number_of_containers == 2  # type: ignore[union-attr]
    assert spec.component("ps") is None


def test_from_json_file_reports_unreadable_and_non_object_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpecError, match="cannot read service spec"):
        Service.from_json_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidSpecError, match="not valid JSON"):
        Service.from_json_file(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InvalidSpecError, match="expected a JSON object, got list"):
        Service.from_json_file(arr)


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("name", "Mnist", "name", "must match"),
        ("name", "mnist_elastic", "name", "must match"),
        ("name", "1mnist", "name", "must match"),
        ("name", "mnist\n", "name", "must match"),
        ("name", "", "name", "must match"),
        ("name", "a" * (SERVICE_NAME_MAX_LENGTH + 1), "name", "at most 63"),
        ("version", _DELETE, "version", "Field required"),
        ("version", "  ", "version", "blank"),
        ("components.1.name", "Worker", "components.1.name", "must match"),
        ("components.1.name", "w" * (COMPONENT_NAME_MAX_LENGTH + 1), "components.1.name", "at most 44"),
        ("components.1.resource.memory", "0", "components.1.resource.memory", "positive"),
        ("components.1.resource.memory", 0, "components.1.resource.memory", "positive"),
        ("components.1.resource.memory", -512, "components.1.resource.memory", "whole number"),
        ("components.1.resource.memory", "2G", "components.1.resource.memory", "whole number"),
        ("components.1.resource.memory", 1.5, "components.1.resource.memory", "whole number"),
        ("components.1.resource.cpus", 0, "components.1.resource.cpus", "greater than 0"),
        ("components.1.resource.cpus", -2, "components.1.resource.cpus", "greater than 0"),
        ("components.1.resource.cpus", "2", "components.1.resource.cpus", "valid integer"),
        ("components.1.number_of_containers", -1, "components.1.number_of_containers", "greater than or equal to 0"),
        ("components.1.number_of_containers", True, "components.1.number_of_containers", "valid integer"),
        ("components.1.number_of_containers", _DELETE, "components.1.number_of_containers", "Field required"),
        ("components.1.restart_policy", "SOMETIMES", "components.1.restart_policy", "ALWAYS"),
        ("components.1.restartPolicy", "NEVER", "components.1.restartPolicy", "Extra inputs"),
        ("components.1.configuration.env", {"N": 3}, "components.1.configuration.env.N", "valid string"),
        ("lifetime", 0, "lifetime", "greater than 0"),
        ("components", [], "components", "at least 1"),
        ("components.1.resource", _DELETE, "components.1.resource", "no resource"),
        ("components.1.launch_command", _DELETE, "components.1.launch_command", "needs a launch_command"),
        ("components.1.dependencies", ["ps"], "components.1.dependencies.0", "not another component"),
        ("components.1.dependencies", ["worker"], "components.1.dependencies.0", "not another component"),
        (
            "components.1.decommissioned_instances",
            ["driver-0"],
            "components.1.decommissioned_instances.0",
            "not an instance of component 'worker'",
        ),
    ],
)
def test_each_bad_field_is_rejected_with_its_path(path: str, value: Any, field: str, words: str) -> None:
    err = rejected(_set(good_spec(), path, value))
    assert field in err.fields
    assert f"{field}: " in str(err)
    assert words in str(err)


def test_duplicate_component_names_name_the_second_one() -> None:
    data = good_spec()
    data["components"][1]["name"] = "driver"
    err = rejected(data)
    assert err.fields == ("components.1.name",)
    assert "duplicate component name 'driver' (also components.0)" in str(err)


def test_dependency_cycle_is_rejected() -> None:
    data = good_spec()
    data["components"][0]["dependencies"] = ["worker"]
    data["components"][1]["dependencies"] = ["driver"]
    err = rejected(data)
    assert err.fields == ("components.0.dependencies",)
    assert "cycle: driver -> worker -> driver" in str(err)


def test_every_problem_is_reported_at_once() -> None:
    data = _set(good_spec(), "name", "Bad_Name")
    data = _set(data, "version", _DELETE)
    data = _set(data, "components.0.resource.cpus", 0)
    err = rejected(data)
    assert set(err.fields) == {"name", "version", "components.0.resource.cpus"}


def test_service_level_resource_and_docker_artifact_satisfy_components() -> None:
    data = {
        "name": "svc",
        "version": "2",
        "artifact": {"id": "registry/worker:1", "type": "DOCKER"},
        "resource": {"cpus": 1, "memory": "256"},
        "components": [{"name": "worker", "number_of_containers": 3}],
    }
    assert Service.from_dict(data).to_dict() == data


def test_tarball_artifact_still_needs_a_launch_command() -> None:
    data = _set(good_spec(), "components.1.launch_command", _DELETE)
    data = _set(data, "components.1.artifact", {"id": "hdfs:///apps/job.tgz", "type": "TARBALL"})
    assert rejected(data).fields == ("components.1.launch_command",)


def test_invalid_spec_error_is_both_a_yarn_error_and_a_value_error() -> None:
    err = rejected(_set(good_spec(), "version", _DELETE))
    assert isinstance(err, YarnError)
    assert isinstance(err, ValueError)
    assert err.status_code is None


def test_direct_construction_raises_pydantic_error_with_the_location() -> None:
    with pytest.raises(ValidationError) as info:
        Service.model_validate(_set(good_spec(), "components.0.resource.memory", "-1"))
    assert info.value.errors()[0]["loc"] == ("components", 0, "resource", "memory")


def test_assignment_is_validated_too() -> None:
    spec = Service.from_dict(good_spec())
    with pytest.raises(ValidationError):
        spec.components[1].number_of_containers = -3
    assert spec.components[1].number_of_containers == 2


_YARN_NAME = re.compile(r"[a-z][a-z0-9-]*")


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"\A[a-z][a-z0-9-]{0,62}\Z"))
def test_names_yarn_accepts_are_accepted(name: str) -> None:
    assert Service.from_dict(_set(good_spec(), "name", name)).name == name


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=70))
def test_names_yarn_rejects_are_rejected_naming_the_field(name: str) -> None:
    data = _set(good_spec(), "name", name)
    if _YARN_NAME.fullmatch(name) and len(name) <= SERVICE_NAME_MAX_LENGTH:
        assert Service.from_dict(data).name == name
    else:
        assert rejected(data).fields == ("name",)


def test_a_double_quote_in_launch_command_is_rejected_naming_the_field():
    from submarine_elastic.yarn import Component, InvalidSpecError, Service

    with pytest.raises(InvalidSpecError, match=r"components\.0\.launch_command.*double quotes"):
        Service.from_dict(
            {
                "name": "svc",
                "version": "1",
                "components": [{"name": "worker", "number_of_containers": 1, "launch_command": 'echo "hi"'}],
            }
        )
    assert Component(name="worker", number_of_containers=1, launch_command="echo 'hi'").launch_command == "echo 'hi'"
