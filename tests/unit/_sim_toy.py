"""A toy application whose numbers make every simulated JCT computable by hand.

Every iteration takes exactly 1 s on any placement and any local batch, and the gradient is pure noise
(``grad_sqr`` = 0), so an iteration at global batch ``B`` is worth ``B`` iterations at the initial batch 1.
Two epochs end at progress 50 and 100. A job running with ``k`` workers at one example per worker
therefore progresses ``k`` units per second and needs ``100 / k`` seconds alone.
"""

from __future__ import annotations

from pathlib import Path

TOY = "toy"
WORK = 100.0


def write_toy_data(root: Path, name: str = TOY) -> Path:
    """Write ``<root>/traces/<name>/`` and return ``root`` (usable as a Pollux data directory)."""
    app = root / "traces" / name
    app.mkdir(parents=True)
    placements = ["placement,local_bsz,step_time,sync_time"]
    for placement in ("1", "2", "3", "4", "11", "22", "44", "444", "4444"):
        for bsz in (1, 64):
            placements.append(f"{placement},{bsz},1.0,0.0")
    (app / "placements.csv").write_text("\n".join(placements) + "\n")
    scal = ["num_nodes,num_replicas,local_bsz,step_time,sync_time"]
    for nodes, replicas in ((6, 6), (6, 24), (16, 16), (16, 64)):
        for bsz in (1, 64):
            scal.append(f"{nodes},{replicas},{bsz},1.0,0.0")
    (app / "scalability.csv").write_text("\n".join(scal) + "\n")
    for batch in (1, 64):
        rows = ["progress,iteration,metric,grad_sqr,grad_var", "50,50,0.5,0.0,1.0", f"{WORK},100,0.9,0.0,1.0"]
        (app / f"validation-{batch}.csv").write_text("\n".join(rows) + "\n")
    return root
