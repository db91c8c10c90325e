"""How much the web hook costs the training thread, with no page, ten reading pages, ten stuck ones.

    python plugins/sigmann-web/benchmarks/tabs.py [--epochs 20] [--repeats 5] [--every 10]

Trains examples/digits.toml (needs sigmann-sklearn) and times the training
loop: the sum of the epochs' training seconds, which leaves out validation
and the pause at the start, while the pages connect. The pages are event
streams read in another process, as browser tabs would be; "stuck" pages
connect and never read. Configurations alternate; the fastest of the repeats
is compared (other load on the machine only ever adds time), the median shown
too. The last column is the CPU time the rest of the process (the server's
thread, mostly) used while the run trained, as a share of the training time:
what it can have taken from the training thread through the GIL, whatever
else runs on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from sigma_core import Loop, build_run, validate_run
from sigmann_web.hook import WebHook

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"
PAGES = """
import socket, sys, threading
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def page():
    s = socket.create_connection((host, port))
    s.sendall(b"GET /api/events HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
    while mode == "reading" and s.recv(65536):
        pass
    threading.Event().wait()
for _ in range(10):
    threading.Thread(target=page, daemon=True).start()
threading.Event().wait()
"""


def train(epochs: int, every: int, pages: str | None) -> tuple[float, float]:
    """(training seconds, CPU seconds the rest of this process used meanwhile: the server's share of the GIL)."""
    raw = tomllib.loads(EXAMPLE.read_text())
    raw["training"]["epochs"] = epochs
    run = build_run(validate_run(raw))
    run.trainer.initialise(run.handler)
    hooks, clients = [], None
    if pages is not None:
        hooks.append(WebHook(every=every, paused=True))
    operator = Loop(run.trainer, epochs=epochs, hooks=hooks)
    operator.start()
    if hooks:
        while hooks[0].server is None or operator.state.value != "paused":
            time.sleep(0.01)
        server = hooks[0].server
        if pages:
            clients = subprocess.Popen([sys.executable, "-c", PAGES, server.host, str(server.port), pages])
            while len(server.pages) < 10:
                time.sleep(0.01)
    clock = time.pthread_getcpuclockid(operator._thread.ident)
    process, training = time.process_time(), time.clock_gettime(clock)
    operator.signal_resume()
    last = training
    while operator._thread.is_alive():  # the thread's CPU clock ends with the thread: sample it
        last = time.clock_gettime(clock)
        operator._thread.join(0.01)
    others = time.process_time() - process - (last - training)
    operator.join()
    if clients is not None:
        clients.kill()
    return sum(report.seconds for report in operator.reports), others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=int, default=10, help="the hook's every (1: an event per iteration)")
    args = parser.parse_args()
    configurations = {"no web hook": None, "web hook, no page": "", "ten reading pages": "reading",
                      "ten stuck pages": "stuck"}
    train(2, args.every, None)  # compile the kernels first
    times, others = {name: [] for name in configurations}, {name: [] for name in configurations}
    for _ in range(args.repeats):
        for name, pages in configurations.items():
            seconds, cpu = train(args.epochs, args.every, pages)
            times[name].append(seconds)
            others[name].append(cpu / seconds)
    base = min(times["no web hook"])
    print(f"digits, {args.epochs} epochs, every={args.every}, {args.repeats} repeats")
    print(f"  {'':<22} {'fastest':>9} {'vs none':>8} {'median':>8}  CPU outside training, of its time")
    for name, samples in times.items():
        print(f"  {name:<22} {min(samples):7.3f} s {100 * (min(samples) / base - 1):+7.1f} % "
              f"{statistics.median(samples):6.3f} s  {100 * statistics.median(others[name]):5.1f} %")


if __name__ == "__main__":
    main()
