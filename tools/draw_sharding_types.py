"""Draw one picture per sharding type into docs/img/ (run: python tools/draw_sharding_types.py).

Each picture shows where the rows and columns of embedding tables live on a job of four ranks on
two hosts (ranks 0-1 on host 0, ranks 2-3 on host 1), with TorchRec's shard geometry: row blocks
of ceil(rows / ranks), column blocks of 128.
"""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

OUT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"
COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
HOST_OF = {0: 0, 1: 0, 2: 1, 3: 1}

# A block: (table, row start, row end, column start, column end, rank); rows and columns are in
# units of the drawn table (rows 0-1, columns 0-1 for a table of the drawn width).
Block = tuple[str, float, float, float, float, int]


def _blocks(kind: str) -> tuple[list[Block], str]:
    if kind == "table_wise":
        return [(f"T{t}", 0, 1, 0, 1, t) for t in range(4)], "each table whole on one rank"
    if kind == "data_parallel":
        return [("T0", 0, 1, 0, 1, r) for r in range(4)], "every rank holds the whole table"
    if kind == "column_wise":
        return (
            [("T0", 0, 1, c / 4, (c + 1) / 4, c) for c in range(4)],
            "dim 512 in column blocks of 128, any ranks",
        )
    if kind == "table_column_wise":
        return (
            [("T0", 0, 1, c / 2, (c + 1) / 2, c) for c in range(2)]
            + [("T1", 0, 1, c / 2, (c + 1) / 2, 2 + c) for c in range(2)],
            "column blocks on the ranks of one host",
        )
    if kind == "row_wise":
        return (
            [("T0", r / 4, (r + 1) / 4, 0, 1, r) for r in range(4)],
            "rows in blocks of ceil(rows / 4), one per rank",
        )
    if kind == "table_row_wise":
        return (
            [("T0", r / 2, (r + 1) / 2, 0, 1, r) for r in range(2)]
            + [("T1", r / 2, (r + 1) / 2, 0, 1, 2 + r) for r in range(2)],
            "row blocks on the ranks of one host",
        )
    raise ValueError(f"unknown sharding type {kind!r}")


def draw(kind: str, path: pathlib.Path) -> None:
    """Write the picture of `kind` to `path` (PNG)."""
    blocks, caption = _blocks(kind)
    tables = sorted({b[0] for b in blocks})
    copies = kind == "data_parallel"
    panels = 4 if copies else len(tables)
    fig, axes = plt.subplots(1, panels, figsize=(max(1.9 * panels + 0.6, 6.2), 2.6), squeeze=False)
    for i, ax in enumerate(axes[0]):
        mine = [b for b in blocks if (b[5] == i if copies else b[0] == tables[i])]
        for _table, r0, r1, c0, c1, rank in mine:
            ax.add_patch(
                Rectangle(
                    (c0, 1 - r1), c1 - c0, r1 - r0, facecolor=COLORS[rank], edgecolor="white", lw=2
                )
            )
            ax.text(
                (c0 + c1) / 2, 1 - (r0 + r1) / 2, f"rank {rank}", ha="center", va="center",
                color="white", fontsize=8, rotation=90 if c1 - c0 < 0.3 else 0,
            )  # fmt: skip
        ax.set_title(f"{mine[0][0]}" + (f" (copy {i})" if copies else ""), fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("columns (dim)", fontsize=7)
        if i == 0:
            ax.set_ylabel("rows", fontsize=7)
    fig.suptitle(f"{kind}: {caption}", fontsize=10)
    legend = [
        Rectangle((0, 0), 1, 1, color=COLORS[r], label=f"rank {r} (host {HOST_OF[r]})")
        for r in range(4)
    ]
    fig.legend(handles=legend, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


KINDS = [
    "data_parallel",
    "table_wise",
    "column_wise",
    "table_column_wise",
    "row_wise",
    "table_row_wise",
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        draw(kind, OUT / f"sharding_{kind}.png")
        print(OUT / f"sharding_{kind}.png")


if __name__ == "__main__":
    main()
