"""The Horovod adapter refuses a Horovod it is not written for, naming the versions, and one that lacks a member
it uses, naming the member; the installed one passes both checks."""

from __future__ import annotations

import horovod
import pytest

from submarine_elastic.elastic.horovod_adapter import (
    PRIVATE_MEMBERS,
    SUPPORTED_VERSIONS,
    HorovodVersionError,
    check_horovod,
    missing_members,
)
from submarine_elastic.protocol.api import ElasticError


class Driver:
    period = 1.0

    def __init__(self) -> None:
        self._hosts = []


def test_the_installed_horovod_is_one_the_adapter_is_written_for() -> None:
    assert ".".join(horovod.__version__.split(".")[:2]) in SUPPORTED_VERSIONS
    assert missing_members(PRIVATE_MEMBERS) == []
    check_horovod(horovod.__version__)


@pytest.mark.parametrize("version", ["0.27.2", "0.29.0", "1.0.0", "0.2", "garbage"])
def test_another_release_is_refused_naming_both_versions(version: str) -> None:
    with pytest.raises(HorovodVersionError) as err:
        check_horovod(version)
    assert str(err.value).startswith(f"Horovod {version} is installed; the job driver is written for Horovod 0.28.x")
    assert isinstance(err.value, ElasticError)


@pytest.mark.parametrize("version", ["0.28.0", "0.28.1", "0.28.1rc1"])
def test_every_patch_release_of_a_supported_one_passes(version: str) -> None:
    check_horovod(version, [(Driver, "period")])


def test_a_member_set_in_init_counts_and_a_missing_one_is_named() -> None:
    assert missing_members([(Driver, "period"), (Driver, "_hosts"), (Driver, "_gone"), (pytest, "_nope")]) == [
        "Driver._gone",
        "pytest._nope",
    ]
    with pytest.raises(HorovodVersionError) as err:
        check_horovod("0.28.1", [(Driver, "_hosts"), (Driver, "_gone")])
    assert str(err.value) == (
        "Horovod 0.28.1 lacks what the job driver uses of it (Driver._gone); it is written for Horovod 0.28.x"
    )
