"""A container's resources as Hadoop Submarine writes them (``--worker_resources``, ``--tensorboard_resources``).

The grammar: comma-separated ``key=value`` parts; ``memory=8G``, ``memory=2048M`` (a bare number is MB) or
``memory-mb=2048``; ``vcores=2``; ``gpu=1`` or ``yarn.io/gpu=2``; any other YARN resource type by its name
(``yarn.io/fpga=1``), which :func:`~submarine_elastic.submit.service.refuse_unoffered` checks against the
ResourceManager's before anything is submitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from submarine_elastic.submit.api import JobSpecError
from submarine_elastic.yarn import GPU_RESOURCE

#: A YARN resource type's name (``resource-types.xml``): an optional ``prefix/`` and a name.
_RESOURCE_NAME = re.compile(r"(?:[a-z][a-z0-9.-]*/)?[a-z][a-z0-9._-]*")
_MEMORY = re.compile(r"(\d+)\s*([GgMm]?)")


@dataclass(frozen=True)
class WorkerResources:
    """One container's size: memory in MB, vcores, ``yarn.io/gpu`` and other resource types by name."""

    memory_mb: int
    vcores: int
    gpus: int = 0
    #: resource types beyond memory, vcores and GPUs (name, amount), in the order given
    extra: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, text: str, flag: str = "--worker_resources") -> WorkerResources:
        """``memory-mb=2048,vcores=1`` in Submarine's grammar (module docstring).

        Raises:
            JobSpecError: a malformed part or name, a value that is not a whole number (memory: with G or M),
                a non-positive memory or vcores, no memory (naming ``flag`` and the part).
        """
        values: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or not value.strip() or not key:
                raise JobSpecError(f"{flag}: expected key=value, got {part!r}")
            if not _RESOURCE_NAME.fullmatch(key):
                raise JobSpecError(
                    f"{flag}: {key!r} is not a resource name (memory, memory-mb, vcores, gpu, yarn.io/gpu or "
                    "another YARN resource type such as yarn.io/fpga)"
                )
            key = "gpu" if key == GPU_RESOURCE else key
            if key in values:
                raise JobSpecError(f"{flag}: {key} given twice in {text!r}")
            values[key] = value.strip()
        if "memory-mb" in values and "memory" in values:
            raise JobSpecError(f"{flag}: give memory or memory-mb, not both, in {text!r}")
        memory_text = values.pop("memory-mb", None) or values.pop("memory", None)
        if memory_text is None:
            raise JobSpecError(f"{flag}: memory (memory=8G, memory=2048M or memory-mb=2048) is required in {text!r}")
        m = _MEMORY.fullmatch(memory_text)
        if m is None:
            raise JobSpecError(f"{flag}: memory is not a number of MB (or with G or M): {memory_text!r}")
        memory = int(m.group(1)) * (1024 if m.group(2).lower() == "g" else 1)
        numbers: dict[str, int] = {}
        for key, value in values.items():
            if not value.isdigit():
                raise JobSpecError(f"{flag}: {key} is not a number (a whole one): {value!r}")
            numbers[key] = int(value)
        vcores, gpus = numbers.pop("vcores", 1), numbers.pop("gpu", 0)
        if memory <= 0 or vcores <= 0:
            raise JobSpecError(f"{flag}: memory and vcores must be positive, got {text!r}")
        return cls(memory, vcores, gpus, tuple(numbers.items()))

    def yarn_resource(self) -> dict[str, object]:
        """The YARN Services ``resource`` of a component of this size."""
        resource: dict[str, object] = {"cpus": self.vcores, "memory": str(self.memory_mb)}
        additional = {name: {"value": amount, "unit": ""} for name, amount in self.extra}
        if self.gpus:
            additional[GPU_RESOURCE] = {"value": self.gpus, "unit": ""}
        if additional:
            resource["additional"] = additional
        return resource
