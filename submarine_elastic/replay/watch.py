"""What a long live run costs the machine: peak memory in use and the load average, sampled in a thread."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field


def _used_mb() -> float:
    """Memory in use (total less available), from /proc/meminfo."""
    info: dict[str, int] = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


@dataclass
class MachineWatch:
    """Samples memory in use and the 1-minute load every ``every_s`` while it runs (a context manager)."""

    every_s: float = 2.0
    peak_mb: float = 0.0
    base_mb: float = 0.0
    loads: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> MachineWatch:
        self.base_mb = _used_mb()
        self._thread = threading.Thread(target=self._run, name="machine-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, _used_mb())
            self.loads.append(os.getloadavg()[0])
            self._stop.wait(self.every_s)

    def as_dict(self) -> dict[str, float]:
        return {
            "peak_memory_mb": round(self.peak_mb),
            "memory_before_mb": round(self.base_mb),
            "load_mean": round(sum(self.loads) / len(self.loads), 2) if self.loads else 0.0,
            "load_max": round(max(self.loads), 2) if self.loads else 0.0,
        }
