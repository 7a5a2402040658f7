"""What several benchmarks share: their list arguments and how they write a results file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def int_list(what: str, minimum: int, why: str = "") -> Callable[[str], list[int]]:
    """An argparse type: a comma-separated list of ``what`` (whole numbers of at least ``minimum``; ``why``
    says why, in the error)."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"a comma-separated list of {what}, got {text!r}") from None
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}{why}, got {text!r}")
        return values

    return parse


def write_results(stem: str, results: dict[str, Any], render: Callable[[dict[str, Any]], list[str]]) -> None:
    """``results/<stem>.json`` and ``results/<stem>.md`` (``render`` of the results), which it also prints."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = render(results)
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
