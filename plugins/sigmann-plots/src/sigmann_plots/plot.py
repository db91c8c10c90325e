"""Curves of runs from their ``metrics.jsonl`` (written by the core's ``metrics`` hook), drawn with matplotlib.

Three panels against epochs: training cost (each logged iteration faintly,
each epoch's mean solid) with the held-out cost dashed; held-out accuracy;
learning rate. Several runs are overlaid, one colour each, with a legend.
Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot,
so no global state: safe on a hook's thread) and replace the PNG
atomically, so an image viewer never shows half a file.
"""

from __future__ import annotations

import math
from pathlib import Path

from sigma_core import atomic_write
from sigmann_monitors import read_history


def read_run(directory) -> list[dict]:
    """The records of ``directory``'s ``metrics.jsonl`` (or of that file itself) to draw, one per event and step:
    all of a short run's, about 1,000 a curve of a long one's (the least and greatest of each range of steps,
    read in one streaming pass: :func:`sigmann_monitors.read_history`)."""
    return read_history(directory).records


def draw(runs: dict[str, list[dict]], output) -> Path:
    """Draw ``{label: records}`` into the PNG ``output``, replacing it atomically; returns its path."""
    output = Path(output)
    with atomic_write(output) as stream:  # a path that cannot be written is one line naming it
        figure(runs).savefig(stream, format="png", dpi=110)
    return output


def figure(runs: dict[str, list[dict]]):
    """The matplotlib Figure of ``{label: records}``: cost, held-out accuracy and learning rate against epochs."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    figure = Figure(figsize=(15, 4.4), layout="constrained")
    cost, accuracy, rate = figure.subplots(1, 3)
    for index, (label, records) in enumerate(runs.items()):
        colour, prefix = f"C{index}", f"{label}: " if len(runs) > 1 else ""
        epochs = [r for r in records if r["event"] == "epoch"]
        iterations = [r for r in records if r["event"] == "iteration"]
        x = _epoch_axis(epochs)
        if iterations:
            cost.plot(x(iterations), _values(iterations, "cost"), color=colour, alpha=0.3, linewidth=0.8,
                      label=f"{prefix}training (logged iterations)")
        cost.plot(x(epochs), _values(epochs, "cost"), color=colour, marker="o", markersize=3,
                  label=f"{prefix}training (epoch mean)")
        scores = sorted({key.rpartition(".")[0] for r in epochs for key in r if key.endswith(".accuracy")})
        for style, name in zip(("-", ":", "-."), scores):
            held_out = [r for r in epochs if f"{name}.accuracy" in r]
            cost.plot(x(held_out), _values(held_out, f"{name}.cost"), color=colour, linestyle="--",
                      marker="s", markersize=3, label=f"{prefix}{name}")
            accuracy.plot(x(held_out), _values(held_out, f"{name}.accuracy"), color=colour, linestyle=style,
                          marker="o", markersize=3, label=f"{prefix}{name}")
        rates = iterations or epochs
        rate.plot(x(rates), _values(rates, "learning_rate"), color=colour, label=label)
    for axes, title, ylabel in ((cost, "Cost", "cost"), (accuracy, "Held-out accuracy", "accuracy"),
                                (rate, "Learning rate", "learning rate")):
        axes.set(title=title, xlabel="epoch", ylabel=ylabel)
        axes.grid(alpha=0.3)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    cost.set_yscale("log")
    accuracy.yaxis.set_major_formatter(PercentFormatter(1.0))
    for axes in (cost, accuracy, rate) if len(runs) > 1 else (cost, accuracy):
        if axes.lines:  # below its axes, where no curve runs (constrained layout makes the room)
            axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    figure.suptitle(", ".join(runs))
    return figure


def _values(records: list[dict], key: str) -> list[float]:
    """Each record's ``key``; a gap (NaN) where a record has none (a run stopped inside its first epoch)."""
    return [math.nan if r.get(key) is None else r[key] for r in records]


def _epoch_axis(epochs: list[dict]):
    """Position records on a continuous epoch axis: iteration i of epoch e (of n iterations) is e - 1 + i/n."""
    lengths = {r["epoch"]: r["iteration"] for r in epochs}
    typical = max(lengths.values(), default=1)

    def x(records):
        return [r["epoch"] if r["event"] == "epoch"
                else r["epoch"] - 1 + r["iteration"] / max(lengths.get(r["epoch"], typical), r["iteration"], 1)
                for r in records]

    return x

