"""GPUs on the pseudo-cluster: YARN's ``yarn.io/gpu`` resource type, and stand-in devices for machines without any.

A NodeManager's GPU plugin (``yarn.nodemanager.resource-plugins=yarn.io/gpu``) finds its devices by running
``<path-to-discovery-executables>/nvidia-smi -x -q`` and reading the XML it prints. ``up --gpus-per-node G``
gives each NodeManager a directory holding an ``nvidia-smi`` of its own that prints G devices: copies of the
one GPU in the shipped fixture (a real H200's ``nvidia-smi -x -q``), each with its own minor number, UUID and
PCI bus, so that the ResourceManager counts and schedules G GPUs on every node. Nothing else about a GPU is
simulated: a container that asks CUDA for one finds none.
"""

from __future__ import annotations

import copy
import io
import shlex
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from submarine_elastic.cluster.api import MAX_GPUS_PER_NODE, GpuDevice, GpuDiscoveryError
from submarine_elastic.yarn import GPU_RESOURCE

#: The settings a NodeManager's ``yarn-site.xml`` adds to find its GPUs with the stand-in in ``directory``.
PLUGIN = "yarn.nodemanager.resource-plugins"
#: ``capacity-scheduler.xml``: schedule by every resource, not by memory alone (YARN's default), or the RM
#: would place containers regardless of their GPUs.
DOMINANT_RESOURCE_CALCULATOR = {
    "yarn.scheduler.capacity.resource-calculator": "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
}
#: The file the stand-in is, in a NodeManager's GPU directory (the name GpuDiscoverer runs).
EXECUTABLE = "nvidia-smi"
#: The XML it prints, beside it.
OUTPUT = "nvidia-smi.xml"


def plugin_settings(directory: Path) -> dict[str, str]:
    """A NodeManager's ``yarn-site.xml`` settings for the GPU plugin with the discovery executable in ``directory``
    (absolute): every device it reports is offered (``auto``)."""
    return {
        PLUGIN: GPU_RESOURCE,
        f"{PLUGIN}.gpu.allowed-gpu-devices": "auto",
        f"{PLUGIN}.gpu.path-to-discovery-executables": str(directory),
    }


def resource_types_xml() -> bytes:
    """``resource-types.xml`` declaring ``yarn.io/gpu`` (the RM and every NodeManager read it from their
    configuration directory)."""
    root = ET.Element("configuration")
    prop = ET.SubElement(root, "property")
    ET.SubElement(prop, "name").text = "yarn.resource-types"
    ET.SubElement(prop, "value").text = GPU_RESOURCE
    ET.indent(root)
    out = io.BytesIO()
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    return out.getvalue() + b"\n"


def parse_nvidia_smi(text: bytes) -> list[GpuDevice]:
    """The devices ``nvidia-smi -x -q`` output lists, in its order.

    Raises:
        GpuDiscoveryError: not XML, not an ``nvidia_smi_log``, ``attached_gpus`` not the number of ``gpu``
            elements, or a ``gpu`` without a uuid, a minor number or a memory total (naming which).
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise GpuDiscoveryError(f"nvidia-smi output is not XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise GpuDiscoveryError(f"nvidia-smi output's root is <{root.tag}>, not <nvidia_smi_log>")
    gpus = root.findall("gpu")
    attached = (root.findtext("attached_gpus") or "").strip()
    if attached != str(len(gpus)):
        raise GpuDiscoveryError(f"nvidia-smi output says attached_gpus {attached!r} but lists {len(gpus)} <gpu>")
    devices = []
    for i, gpu in enumerate(gpus):
        fields = {
            name: (gpu.findtext(path) or "").strip()
            for name, path in (
                ("uuid", "uuid"),
                ("minor_number", "minor_number"),
                ("product_name", "product_name"),
                ("memory", "fb_memory_usage/total"),
            )
        }
        missing = [name for name, value in fields.items() if not value]
        if missing:
            raise GpuDiscoveryError(f"nvidia-smi output's gpu {i} ({gpu.get('id')}) has no {', '.join(missing)}")
        memory = fields["memory"].removesuffix("MiB").strip()
        if not (fields["minor_number"].isdigit() and memory.isdigit()):
            raise GpuDiscoveryError(
                f"nvidia-smi output's gpu {i}: minor_number {fields['minor_number']!r} and fb_memory_usage total "
                f"{fields['memory']!r} must be numbers (MiB)"
            )
        devices.append(
            GpuDevice(
                minor_number=int(fields["minor_number"]),
                uuid=fields["uuid"],
                product_name=fields["product_name"],
                pci_bus_id=gpu.get("id", ""),
                memory_total_mib=int(memory),
            )
        )
    return devices


def standin_output(fixture: bytes, count: int, node: str) -> bytes:
    """What the stand-in of the node named ``node`` prints: the fixture's first GPU ``count`` times, device i
    with minor number i, a PCI bus of its own and a UUID that differs on every device of every node (derived
    from the fixture's, ``node`` and i, so a node keeps its UUIDs across restarts).

    Raises:
        GpuDiscoveryError: the fixture lists no GPU, or is not ``nvidia-smi -x -q`` output.
        ValueError: ``count`` out of 0..MAX_GPUS_PER_NODE.
    """
    if not 0 <= count <= MAX_GPUS_PER_NODE:
        raise ValueError(f"count must be 0..{MAX_GPUS_PER_NODE}, got {count}")
    template = parse_nvidia_smi(fixture)
    if not template:
        raise GpuDiscoveryError("the nvidia-smi fixture lists no GPU to copy")
    root = ET.fromstring(fixture)
    first = root.findall("gpu")[0]
    for gpu in root.findall("gpu"):
        root.remove(gpu)
    for i in range(count):
        gpu = copy.deepcopy(first)
        bus = f"{0x10 + 0x0F * i:02X}"
        bus_id = f"00000000:{bus}:00.0"
        gpu.set("id", bus_id)
        _set(gpu, "uuid", f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{template[0].uuid}/{node}/{i}')}")
        _set(gpu, "minor_number", str(i))
        _set(gpu, "pci/pci_bus", bus)
        _set(gpu, "pci/pci_bus_id", bus_id)
        root.append(gpu)
    _set(root, "attached_gpus", str(count))
    out = io.BytesIO()
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    return out.getvalue() + b"\n"


def standin_script(output: Path) -> bytes:
    """The stand-in ``nvidia-smi``: prints ``output`` for ``-x -q`` (all that YARN runs), refuses anything else."""
    return (
        "#!/bin/sh\n"
        "# A stand-in for nvidia-smi on a machine without GPUs: YARN's GPU discovery runs `nvidia-smi -x -q`.\n"
        'if [ "$*" != "-x -q" ]; then\n'
        '  echo "stand-in nvidia-smi: only -x -q is supported, got: $*" >&2\n'
        "  exit 2\n"
        "fi\n"
        f"exec cat {shlex.quote(str(output))}\n"
    ).encode()


def _set(element: ET.Element, path: str, text: str) -> None:
    found = element.find(path)
    if found is not None:
        found.text = text
