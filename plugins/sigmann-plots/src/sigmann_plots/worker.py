"""The ``plots`` hook's drawing process: ``python -m sigmann_plots.worker OUTPUT.png LABEL``.

Reads the run's records as JSON lines on stdin and redraws ``OUTPUT.png``
after each epoch record, unless more records are already waiting (then the
newer epoch is drawn instead); at the end of input, draws what is not drawn
yet. A failure is one line on stderr and exit status 1. Ctrl-C, which reaches
every process of the terminal, is left to ``sigma train``: it stops the run,
the hook closes the input, and the last epoch is drawn.
"""

from __future__ import annotations

import json
import select
import signal
import sys


def main(output: str, label: str) -> int:
    from sigmann_plots.plot import draw  # matplotlib loads while the first epoch trains

    records, pending = [], False
    for line in sys.stdin:
        records.append(json.loads(line))
        pending = pending or records[-1]["event"] == "epoch"
        if pending and not select.select([sys.stdin], [], [], 0)[0]:
            draw({label: records}, output)
            pending = False
    if pending:
        draw({label: records}, output)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sys.exit(main(*sys.argv[1:]))
    except Exception as error:  # the hook's process is the one to report it; one line here
        print(f"sigma plots: cannot draw {sys.argv[1:2]}: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
