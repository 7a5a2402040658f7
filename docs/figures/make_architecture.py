"""Draws docs/figures/architecture.png: the resize loop hop by hop, with the modules of each hop.

Run from the repository root after changing a hop (the picture is committed, not built):

    .venv/bin/python docs/figures/make_architecture.py

Keep it in step with the mermaid diagram in docs/architecture.md: same hops, same numbers.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch  # noqa: E402

OUT = Path(__file__).resolve().parent / "architecture.png"

# Where each hop runs: the colour of its box.
TRAINING = "#d8f0d2"  # a worker container: the training process and the agent
CONTROLLER = "#d6e4f5"  # the controller process
DRIVER = "#fbe3c4"  # the job's driver container
YARN = "#e4e4e4"  # the ResourceManager, the service ApplicationMaster, the NodeManagers

# (number, title, modules, colour, (column, row)): a loop around a 4 x 4 grid, clockwise from the top left.
HOPS = [
    (1, "training step", "user script\ntf_hooks.keras.MetricsCallback\ntf_hooks.session.MetricsHook", TRAINING, (0, 0)),
    (2, "sender thread", "tf_hooks.sender.GrpcSink\ntf_hooks.wire (StepColumns)\ntf_hooks.config", TRAINING, (1, 0)),
    (3, "gRPC metrics service", "metrics.server (Report)\nmetrics.validation\nbearer token, TLS", CONTROLLER, (2, 0)),
    (4, "metrics store", "metrics.store\nthroughput per world size,\nloss trend", CONTROLLER, (3, 0)),
    (5, "controller round", "controller.observe -> step -> act\ncontroller.book, .capacity\ncontroller.store (SQLite)", CONTROLLER, (3, 1)),
    (6, "policy engine", "policy.engine.decide(snapshot)\njob policy + arbiter\n-> Decision", CONTROLLER, (3, 2)),
    (
        7,
        "driver control plane",
        "controller.backend\nsubmit.client.JobClient\nelastic.jobdriver (SetTarget)",
        DRIVER,
        (3, 3),
    ),
    (
        8,
        "YARN Services REST flex",
        "yarn.client.YarnServiceClient\nflex / decommission\nPUT /app/v1/services/...",
        YARN,
        (2, 3),
    ),
    (9, "YARN (re)launch", "RM + service AM + NM\nworker container started\n(restart policy ALWAYS)", YARN, (1, 3)),
    (10, "worker agent", "elastic.agent\nstarts the script at once\nHello, Warm -> driver", TRAINING, (0, 3)),
    (
        11,
        "Horovod elastic driver",
        "elastic.ringhost (host discovery)\nelastic.horovod_adapter\nStart(slot env) -> agent",
        DRIVER,
        (0, 2),
    ),
    (
        12,
        "ring re-formed",
        "tf_hooks.elastic.ring / autojoin\ntf_hooks.elastic.state (sync)\n.data cursor, .rules batch/LR",
        TRAINING,
        (0, 1),
    ),
]

# Labels on the arrows between consecutive hops (from hop n to hop n + 1; 12 goes back to 1).
LINKS = {
    1: "StepRecord\n(deque)",
    2: "Report\n(gRPC stream)",
    3: "checked\nbatch",
    4: "JobSummary",
    5: "Snapshot",
    6: "Decision",
    7: "the driver\nasks YARN",
    8: "new\nsize",
    9: "Attach\n(gRPC)",
    10: "warm: offered\nto discovery",
    11: "hvd.init() gets\nits slot",
    12: "next steps at\nthe new size",
}

W, H = 3.3, 1.75  # box size, in grid units
DX, DY = 4.6, 2.75  # grid spacing


def centre(col: int, row: int) -> tuple[float, float]:
    return col * DX, -row * DY


def edge_points(a: tuple[int, int], b: tuple[int, int]) -> tuple[tuple[float, float], tuple[float, float]]:
    (ax, ay), (bx, by) = centre(*a), centre(*b)
    if ay == by:  # same row
        sign = 1 if bx > ax else -1
        return (ax + sign * W / 2, ay), (bx - sign * W / 2, by)
    sign = 1 if by > ay else -1
    return (ax, ay + sign * H / 2), (bx, by - sign * H / 2)


def main() -> None:
    fig, ax = plt.subplots(figsize=(17, 11.5))
    ax.set_xlim(-W / 2 - 0.4, 3 * DX + W / 2 + 0.4)
    ax.set_ylim(-3 * DY - H / 2 - 1.3, H / 2 + 1.0)
    ax.axis("off")
    ax.set_title("submarine-elastic: from a training step to a re-formed ring", fontsize=17, fontweight="bold", pad=12)

    where = {}
    for number, title, modules, colour, (col, row) in HOPS:
        x, y = centre(col, row)
        where[number] = (col, row)
        ax.add_patch(
            FancyBboxPatch(
                (x - W / 2, y - H / 2),
                W,
                H,
                boxstyle="round,pad=0.02,rounding_size=0.15",
                facecolor=colour,
                edgecolor="#444444",
                linewidth=1.2,
            )
        )
        ax.text(x, y + H / 2 - 0.3, f"{number}. {title}", ha="center", va="center", fontsize=12.5, fontweight="bold")
        ax.text(x, y - 0.2, modules, ha="center", va="center", fontsize=10, family="monospace", linespacing=1.35)

    for number, label in LINKS.items():
        following = 1 if number == 12 else number + 1
        start, end = edge_points(where[number], where[following])
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=20, linewidth=1.6, color="#333333"))
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        vertical = start[0] == end[0]
        ax.text(
            mx + (0.12 if vertical else 0),
            my + (0 if vertical else 0.1),
            label,
            ha="left" if vertical else "center",
            va="center" if vertical else "bottom",
            fontsize=9.5,
            style="italic",
            color="#333333",
        )

    # Who else enters the loop, in the middle of the ring.
    cx, cy = 1.5 * DX, -1.5 * DY
    ax.text(
        cx,
        cy,
        "Other ways in\n\n"
        "submarine job flex  ->  7  (the same Flex call)\n"
        "submarine job run   ->  8  (the service is created)\n"
        "a JVM over the py4j bridge  ->  5  (arrivals, metrics)\n"
        "jobs arriving or leaving  ->  5  (a round at once)\n\n"
        "Modules are under submarine_elastic/ unless named tf_hooks.",
        ha="center",
        va="center",
        fontsize=11,
        family="monospace",
        linespacing=1.4,
        bbox={"boxstyle": "round,pad=0.6", "facecolor": "white", "edgecolor": "#999999"},
    )

    ax.legend(
        handles=[
            Patch(facecolor=TRAINING, edgecolor="#444444", label="worker container (agent, training process)"),
            Patch(facecolor=CONTROLLER, edgecolor="#444444", label="controller process"),
            Patch(facecolor=DRIVER, edgecolor="#444444", label="job driver container"),
            Patch(facecolor=YARN, edgecolor="#444444", label="YARN (ResourceManager, service AM, NodeManagers)"),
        ],
        loc="lower center",
        ncol=4,
        fontsize=10.5,
        frameon=False,
        bbox_to_anchor=(0.5, -0.01),
    )
    fig.tight_layout()
    fig.savefig(OUT, dpi=100)


if __name__ == "__main__":
    main()
