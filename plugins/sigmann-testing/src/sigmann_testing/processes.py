"""Child processes a test interrupts as a user would, with Ctrl-C (SIGINT).

A test suite started under ``nohup``, or as a background job of a shell (``pytest ... &``), runs with SIGINT
ignored, and a child process inherits that: Python then installs no handler of its own, and a test's "Ctrl-C"
reaches nobody. Pass :func:`default_ctrl_c` as ``preexec_fn`` to :class:`subprocess.Popen` so the child takes
SIGINT as a terminal's Ctrl-C, whatever the suite was started with.
"""

import signal


def default_ctrl_c() -> None:
    """In a child process, before it runs its program: SIGINT back to its default, undoing an inherited ignore."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
