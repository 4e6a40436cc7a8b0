"""The Serving performance stage's latency plot: time to first token and inter-token latency against concurrency for
each server whose predicted latency a change moves against its baseline (the baseline's curve dashed beside it), as
one PNG beside report.md. Run in `.venv-perf`, which holds matplotlib, by `preview/performance_prediction.py`
draw_plot, and only for a preview given a baseline; it imports nothing of the project.

Request (stdin): {"servers": [{"server": str, "estimated": bool, "predictions": [point, ...], "baseline": [point, ...]
| null}, ...]}, each point {"concurrency", "ttftMs", "tpotMs", ...}; the PNG's path is the one argument.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

AXES = (("ttftMs", "time to first token"), ("tpotMs", "inter-token latency"))


def draw(servers: list[dict[str, Any]], path: Path) -> None:
    """Matplotlib's object API on the Agg canvas, as its docs draw without pyplot (no figure manager, no backend
    chosen at import): one Figure, two axes, written whole or not at all."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), dpi=100)
    canvas = FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2)
    for index, server in enumerate(servers):
        color = f"C{index % 10}"
        name = server["server"] + (" (~, scaled from the whole GPU)" if server.get("estimated") else "")
        for axis, (key, _) in zip(axes, AXES):
            if server.get("baseline"):
                points = server["baseline"]
                xs, ys = [p["concurrency"] for p in points], [p[key] for p in points]
                axis.plot(xs, ys, color=color, linestyle="--", marker=".", label=f"{server['server']}, baseline")
            xs, ys = [p["concurrency"] for p in server["predictions"]], [p[key] for p in server["predictions"]]
            axis.plot(xs, ys, color=color, marker="o", label=name)
    for axis, (_, title) in zip(axes, AXES):
        axis.set(title=title, xlabel="concurrent requests per replica", ylabel="ms")
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    # Reproducible bytes: no creation date or software tag in the PNG's metadata.
    canvas.print_png(partial, metadata={"Software": None})
    os.replace(partial, path)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m preview.performance_plot <png> < request.json", file=sys.stderr)
        return 2
    draw(json.loads(sys.stdin.read())["servers"], Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
