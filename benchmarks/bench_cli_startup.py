"""How long the ``submarine`` command takes to answer, side by side with a bare interpreter start.

Each command runs ``--runs`` times in turn (interleaved, so a busy moment hits all of them alike):
``python -c pass`` (the floor), ``submarine --help``, ``submarine job --help``, and ``submarine job show``
of a job on a ResourceManager that refuses connections (the command's own start-up plus one refused
request, no waiting). Target: ``submarine --help`` and ``job show`` under 0.3 s.

Writes ``benchmarks/results/cli_startup.json`` and ``cli_startup.md``.
Run: ``.venv/bin/python benchmarks/bench_cli_startup.py [--runs 15]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SUBMARINE = str(Path(sys.executable).with_name("submarine"))
TARGET_S = 0.3


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if args.runs < 3:
        parser.error("--runs must be at least 3")
    env = {**os.environ, "SUBMARINE_RM_URL": f"http://127.0.0.1:{closed_port()}"}
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "submarine --help": [SUBMARINE, "--help"],
        "submarine job --help": [SUBMARINE, "job", "--help"],
        "submarine job show (RM refuses)": [SUBMARINE, "job", "show", "bench-job"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            times[name].append(time.perf_counter() - started)
    floor = statistics.median(times["python -c pass"])
    rows = {
        name: {
            "median_s": round(statistics.median(samples), 4),
            "min_s": round(min(samples), 4),
            "max_s": round(max(samples), 4),
            "ratio_to_bare_python": round(statistics.median(samples) / floor, 2),
        }
        for name, samples in times.items()
    }
    results = {"runs": args.runs, "target_s": TARGET_S, "commands": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cli_startup.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# CLI start-up",
        "",
        f"{args.runs} runs of each, interleaved; target under {TARGET_S} s for `submarine --help` and `job show`.",
        "",
        "| command | median s | min s | max s | / bare python |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{name}` | {r['median_s']} | {r['min_s']} | {r['max_s']} | {r['ratio_to_bare_python']} |"
        for name, r in rows.items()
    ]
    (RESULTS / "cli_startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
