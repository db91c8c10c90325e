"""The ``epoch_lines`` hook: one plain line per epoch on stderr, so that a core-only install reports progress.

``sigma train`` adds it unless ``--quiet`` when no ``progress`` hook is installed (``sigmann-monitors`` draws a bar
and prints the same line through :func:`epoch_line`).
"""

import sys

from sigma_core.hooks.base import Hook


def epoch_line(report, epochs: int) -> str:
    """One epoch as a line: its mean training cost, each held-out iterator's scores, the iterations and their time."""
    scores = "".join(f"  {name} accuracy {scores['accuracy']:.2%} cost {scores['cost']:.4f}"
                     for name, scores in report.validation.items())
    rate = report.trained / max(report.seconds, 1e-9)
    resumed = (f" (resumed at {report.iterations - report.trained} of {report.iterations})"
               if report.trained != report.iterations else "")
    return (f"epoch {report.epoch}/{epochs}  train cost {report.cost:.4f}{scores}  "
            f"{report.trained} it{resumed} in {report.seconds:.2f}s ({rate:,.0f} it/s)")


class EpochLines(Hook):
    """Prints :func:`epoch_line` to stderr after every epoch."""

    name = "epoch_lines"

    def on_epoch(self, report):
        print(epoch_line(report, self.run.epochs), file=sys.stderr, flush=True)
