#!/usr/bin/env python3
"""A check for a machine with NVIDIA GPUs; CI never runs it on one.

(a) Runs ``nvidia-smi -x -q`` as YARN's GPU discovery does, parses it as the project does
    (``submarine_elastic.cluster.gpu.parse_nvidia_smi``), prints each device and checks that the pseudo-cluster's
    stand-in built from it prints as many parseable devices. ``--save FILE`` keeps the output verbatim: saved over
    ``submarine_elastic/cluster/hadoop/gpu/nvidia-smi-h200.xml`` it replaces the stand-in's fixture.
(b) For each device, starts a process with ``CUDA_VISIBLE_DEVICES`` naming that device alone, by UUID and by its
    minor number (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), and checks with PyTorch that the process sees exactly
    that one device. Skipped, saying so, where PyTorch is not installed.

Usage: .venv/bin/python scripts/gpu_check.py [--save FILE] [--nvidia-smi PATH]
Exit status: 0 every check passed (or was skipped), 1 a check failed, 2 no usable nvidia-smi.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from submarine_elastic.cluster import GpuDevice, GpuDiscoveryError
from submarine_elastic.cluster.gpu import parse_nvidia_smi, standin_output

# What a process started with one device visible reports about the devices it sees.
_PROBE = """
import json, torch
props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
print(json.dumps([{"uuid": str(getattr(p, "uuid", "")), "name": p.name} for p in props]))
"""


def discover(nvidia_smi: str) -> tuple[bytes, list[GpuDevice]]:
    """(a): the output of ``nvidia-smi -x -q`` and its devices.

    Raises:
        OSError, subprocess.SubprocessError: nvidia-smi could not run, or failed.
        GpuDiscoveryError: its output is not what YARN's discovery reads.
    """
    out = subprocess.run([nvidia_smi, "-x", "-q"], capture_output=True, check=True, timeout=30).stdout
    return out, parse_nvidia_smi(out)


def sees(env: dict[str, str]) -> list[dict[str, str]] | None:
    """The devices a process started with ``env`` added sees (PyTorch), None without PyTorch."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    if done.returncode != 0:
        if "No module named 'torch'" in done.stderr:
            return None
        raise RuntimeError(f"the probe failed with {env}: {done.stderr.strip()[-500:]}")
    seen: list[dict[str, str]] = json.loads(done.stdout)
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save", type=Path, help="write nvidia-smi -x -q's output to this file")
    parser.add_argument("--nvidia-smi", default=shutil.which("nvidia-smi"), help="the nvidia-smi to run")
    args = parser.parse_args(argv)
    if not args.nvidia_smi:
        print("no nvidia-smi on PATH: this check needs a machine with NVIDIA GPUs and their driver", file=sys.stderr)
        return 2
    try:
        xml, devices = discover(args.nvidia_smi)
    except (OSError, subprocess.SubprocessError, GpuDiscoveryError) as exc:
        print(f"(a) {args.nvidia_smi} -x -q: {exc}", file=sys.stderr)
        return 2
    print(f"(a) {args.nvidia_smi} -x -q lists {len(devices)} GPU(s):")
    for d in devices:
        print(f"    minor {d.minor_number}  {d.uuid}  {d.pci_bus_id}  {d.product_name}  {d.memory_total_mib} MiB")
    if args.save:
        args.save.write_bytes(xml)
        print(f"    saved to {args.save}")
    failed = 0
    if devices:
        copies = parse_nvidia_smi(standin_output(xml, 2, "check"))
        ok = [c.product_name for c in copies] == [devices[0].product_name] * 2
        print(f"    the stand-in built from it prints {len(copies)} devices: {'ok' if ok else 'WRONG'}")
        failed += not ok
    for d in devices:
        for how, env in (
            ("by uuid", {"CUDA_VISIBLE_DEVICES": d.uuid}),
            ("by minor number", {"CUDA_VISIBLE_DEVICES": str(d.minor_number), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
        ):
            seen = sees(env)
            if seen is None:
                print("(b) skipped: PyTorch is not installed here (pip install torch), nothing checks what CUDA sees")
                return 1 if failed else 0
            ok = len(seen) == 1 and d.uuid.removeprefix("GPU-") in seen[0]["uuid"]
            print(f"(b) minor {d.minor_number} {how}: the process sees {seen}: {'ok' if ok else 'WRONG'}")
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
