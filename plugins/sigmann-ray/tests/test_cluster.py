"""The ``ray`` operator on a real two-node Ray cluster, started on this machine with token authentication on.

The cluster is two ``ray start`` processes trees, a head and a second node with
one CPU each (so the two workers, the driver and one actor, land one per node), each in a temp dir of its
own and with its token in a file of its own: nothing here touches another Ray
instance on the machine (other tests' local ones, a user's ``~/.ray``). The
finaliser stops exactly the processes this module started (every process
whose command line names its temp dir, and their children), not ``ray stop``,
which would stop every Ray instance on the machine.

Every run is ``sigma train`` in a subprocess, as a user runs it: training by
address with the token gives the single worker's costs; no token and a dead
address are one line each; a worker killed on the second node is restarted
and the run still gives the single worker's costs; with ``restarts = 0`` the
run ends in one line and exit status 2 (not a crash: three trials); the
actors fill the node other than the driver's first; a driver killed with
SIGKILL leaves no worker behind on either node.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("ray")

from sigma_core import Loop, build_run, validate_run  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
SIGMA = [sys.executable, "-c", "import sys; from sigma_core.cli import main; sys.exit(main())"]
RAY = str(Path(sys.executable).with_name("ray"))
EPOCHS = 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def processes() -> dict[int, tuple[int, str]]:
    """Every live process on this machine: pid -> (parent pid, command line)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state, parent = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if state != "Z":  # a zombie has ended already (and a container's init may never reap it)
                found[int(name)] = (int(parent), command)
    return found


class Cluster:
    """A head and a second node, as ``ray start`` starts them, in temp dirs under ``base``."""

    def __init__(self, base: Path):
        self.base, self.port, self.token = base, free_port(), base / "token"
        self.token.write_text(secrets.token_hex(32))
        self.environment = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
        self.environment.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token))
        common = ["--num-cpus", "1", "--object-store-memory", str(80 * 2**20), "--disable-usage-stats"]
        said = self.ray_start("--head", "--port", str(self.port), "--temp-dir", str(base / "head"),
                              "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                              "--ray-client-server-port", str(free_port()),
                              "--dashboard-agent-listen-port", str(free_port()), *common)
        self.address = re.search(r"ray start --address='([^']+)'", said).group(1)  # as the head prints it
        self.ray_start("--address", self.address, "--temp-dir", str(base / "second"),
                       "--dashboard-agent-listen-port", str(free_port()), *common)

    def ray_start(self, *arguments) -> str:
        done = subprocess.run([RAY, "start", *arguments], env=self.environment, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def raylets(self) -> dict[str, tuple[int, str]]:
        """The two raylets: node ('head' or 'second') -> (pid, command line)."""
        return {node: (pid, command) for pid, (_, command) in processes().items() if "raylet/raylet" in command
                for node in ("head", "second") if f"--temp_dir={self.base / node} " in command + " "}

    def node_id(self, node: str) -> str:
        return re.search(r"--node_id=(\w+)", self.raylets()[node][1]).group(1)

    def workers(self, node: str) -> list[int]:
        """Pids of the RayWorker actors on ``node``."""
        raylet = self.raylets().get(node, (None,))[0]
        return [pid for pid, (parent, command) in processes().items()
                if parent == raylet and command.startswith("ray::RayWorker")]


def stop_processes(base: Path) -> None:
    """SIGTERM, then SIGKILL, to every process whose command line names ``base`` (the cluster's temp dirs) and
    to their children: exactly what this module's cluster started, whatever other Ray instances run here."""
    for kill in (signal.SIGTERM, signal.SIGKILL):
        table = processes()
        ours = {pid for pid, (_, command) in table.items() if str(base) in command}
        while children := {pid for pid, (parent, _) in table.items() if parent in ours} - ours:
            ours |= children
        for pid in ours - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, kill)
        deadline = time.monotonic() + 3  # what Ray's servers do not finish by then is killed
        while kill == signal.SIGTERM and ours & set(processes()) and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster():
    base = Path(tempfile.mkdtemp(prefix="sgr", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    try:
        yield Cluster(base)
    finally:
        stop_processes(base)
        shutil.rmtree(base, ignore_errors=True)


def digits(**operator) -> str:
    """The digits run file without dropout, on numpy float64, for EPOCHS epochs; with ``operator`` the ray
    operator with 2 workers and those settings."""
    text = (ROOT / "examples" / "digits.toml").read_text()
    text = re.sub(r'\[\[network\.layers\]\]\ntype = "dropout"\np = [\d.]+\n\n', "", text)
    text = text.replace('name = "auto"\ndtype = "float32"', 'name = "numpy"\ndtype = "float64"')
    text = re.sub(r"\nepochs = \d+", f"\nepochs = {EPOCHS}", text)
    if operator:
        settings = {"type": "ray", "workers": 2, **operator}
        text += "\n[operator]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    return text


@pytest.fixture(scope="module")
def single_costs():
    run = build_run(validate_run(tomllib.loads(digits())))
    run.trainer.initialise(run.handler)
    return [report.cost for report in Loop(run.trainer, epochs=EPOCHS).run()]


def sigma_train(directory: Path, text: str, *extra, environment: dict | None = None) -> subprocess.Popen:
    (directory / "run.toml").write_text(text)
    return subprocess.Popen([*SIGMA, "train", "run.toml", "--quiet", "--out", "out.json", *extra], cwd=directory,
                            env=environment or {k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def until_synchronised(run: subprocess.Popen) -> tuple[list[str], str]:
    """Read the run's stderr until it says where its workers are; returns the lines read and that line."""
    lines = []
    for line in run.stderr:
        lines.append(line)
        if "results through" in line:
            return lines, line
    raise AssertionError("the run ended before its workers took the state:\n" + "".join(lines))


def costs(directory: Path) -> list[float]:
    return [entry["cost"] for entry in json.loads((directory / "out.json").read_text())["history"]]


def test_training_by_address_with_a_token_file_gives_the_single_workers_costs(cluster, single_costs, tmp_path):
    run = sigma_train(tmp_path, digits(address=cluster.address, token_file=str(cluster.token)))
    lines, synced = until_synchronised(run)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, "".join(lines) + err
    # One worker per node, so the results crossed nodes through Ray's object transfer.
    assert cluster.node_id("head")[:8] in synced and cluster.node_id("second")[:8] in synced, synced
    assert "through Ray's object transfer" in synced
    assert costs(tmp_path) == pytest.approx(single_costs, rel=1e-12)
    secret = cluster.token.read_text()  # the token is in no log, checkpoint or saved run file
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    assert secret not in out + err + "".join(lines)


def test_without_a_token_joining_is_one_line_naming_the_address_and_how_to_give_one(cluster, tmp_path):
    run = sigma_train(tmp_path, digits(address=cluster.address, connect_timeout=2))
    out, err = run.communicate(timeout=60)
    assert run.returncode == 2
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(rf"error: operator 'ray': the Ray cluster at {re.escape(cluster.address)} needs its "
                        r"authentication token .*RAY_AUTH_TOKEN.*RAY_AUTH_TOKEN_PATH.*token_file.*; "
                        r"Ray's messages: \S+\.log", last), last
    assert "Traceback" not in err and "gcs_client" not in err


def test_without_a_token_joining_fails_within_the_connect_timeout(cluster):
    """It took 33-39 s for connect_timeout = 30: the whole join (the probe, importing Ray, Ray's retries and giving
    up) now keeps to it, measured around join() itself in a process of its own."""
    code = (f"import time\nfrom sigma_core import SigmaError\nfrom sigmann_ray.cluster import join\n"
            f"began = time.monotonic()\ntry:\n    join({cluster.address!r}, connect_timeout=6)\n"
            f"except SigmaError:\n    print(time.monotonic() - began)")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60)
    assert done.stdout and 0 < float(done.stdout) <= 6, done.stdout + done.stderr


def test_another_clusters_token_is_one_line_saying_so(cluster, tmp_path):
    wrong = tmp_path / "wrong.token"
    wrong.write_text(secrets.token_hex(32))
    run = sigma_train(tmp_path, digits(address=cluster.address, token_file=str(wrong), connect_timeout=2))
    out, err = run.communicate(timeout=60)
    assert run.returncode == 2
    assert re.fullmatch(rf"error: operator 'ray': the Ray cluster at {re.escape(cluster.address)} refused this "
                        r"process's authentication token: it is not this cluster's .*; Ray's messages: \S+\.log",
                        err.strip().splitlines()[-1]), err
    assert wrong.read_text() not in out + err


def test_a_dead_address_is_one_line_within_the_connect_timeout(tmp_path):
    port = free_port()  # nothing listens there
    began = time.monotonic()
    run = sigma_train(tmp_path, digits(address=f"127.0.0.1:{port}", connect_timeout=5))
    out, err = run.communicate(timeout=60)
    assert run.returncode == 2 and time.monotonic() - began < 30
    assert err.strip().splitlines()[-1] == (f"error: operator 'ray': no Ray cluster answers at 127.0.0.1:{port} "
                                            f"(Connection refused); start one there with `ray start --head --port "
                                            f"{port}`, or correct address")


def test_a_worker_killed_on_the_second_node_is_restarted_and_the_costs_stay(cluster, single_costs, tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    environment.update(RAY_AUTH_TOKEN_PATH=str(cluster.token))  # the token by Ray's own variable this time
    run = sigma_train(tmp_path, digits(address=cluster.address), environment=environment)
    lines, synced = until_synchronised(run)
    index = int(re.search(rf"worker (\d) on node \S+ \(id {cluster.node_id('second')[:8]}\)", synced).group(1))
    (victim,) = cluster.workers("second")
    os.kill(victim, signal.SIGKILL)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, "".join(lines) + err
    restarted = [line for line in err.splitlines()
                 if re.search(rf"ray worker {index} on node \S+ \(id {cluster.node_id('second')[:8]}\) died .* in "
                              r"global step \d+; restarted it, repeating the step", line)]
    assert len(restarted) == 1, err
    assert costs(tmp_path) == pytest.approx(single_costs, rel=1e-12)
    assert "Traceback" not in err and "(raylet)" not in err + out


def test_with_no_restarts_a_lost_worker_ends_the_run_in_one_line_and_status_2(cluster, tmp_path):
    raw = digits(address=cluster.address, token_file=str(cluster.token), restarts=0).replace(
        f"epochs = {EPOCHS}", "epochs = 50")  # still training when the worker is killed
    for trial in range(3):
        directory = tmp_path / str(trial)
        directory.mkdir()
        run = sigma_train(directory, raw)
        until_synchronised(run)
        os.kill(cluster.workers("second")[0], signal.SIGKILL)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 2, (run.returncode, err)  # not -11 (SIGSEGV) or any other signal
        last = err.strip().splitlines()[-1]
        assert re.fullmatch(r"error: ray worker \d on node \S+ \(id \w{8}\) died \(\w+\) in global step \d+; "
                            r"giving up \(restarts = 0 allows none\); Ray's messages: \S+ and the nodes' Ray "
                            r"session logs", last), last
        assert "Traceback" not in err and "(raylet)" not in err + out


def test_a_worker_that_stops_answering_is_one_line_after_the_timeout(cluster, tmp_path):
    raw = digits(address=cluster.address, token_file=str(cluster.token), restarts=0, timeout=3).replace(
        f"epochs = {EPOCHS}", "epochs = 50")
    run = sigma_train(tmp_path, raw)
    lines, synced = until_synchronised(run)
    index = int(re.search(rf"worker (\d) on node \S+ \(id {cluster.node_id('second')[:8]}\)", synced).group(1))
    (victim,) = cluster.workers("second")
    os.kill(victim, signal.SIGSTOP)  # alive, but silent: as a worker behind a lost network would be
    try:
        out, err = run.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    assert run.returncode == 2, err
    assert re.fullmatch(rf"error: ray worker {index} on node \S+ \(id {cluster.node_id('second')[:8]}\) did not "
                        r"answer within 3 s \(timeout\) in global step \d+; giving up \(restarts = 0 allows "
                        r"none\); Ray's messages: \S+ and the nodes' Ray session logs", err.strip().splitlines()[-1]), err


def test_actors_fill_the_other_node_first_and_a_driver_killed_with_sigkill_leaves_none(cluster, tmp_path):
    # The driver (worker 0) joins on the head; half a CPU each: the second node takes two actors, the head the third.
    raw = digits(address=cluster.address, token_file=str(cluster.token), workers=4, cpus_per_worker=0.5).replace(
        f"epochs = {EPOCHS}", "epochs = 50")
    run = sigma_train(tmp_path, raw)
    lines, synced = until_synchronised(run)
    head, second = cluster.node_id("head")[:8], cluster.node_id("second")[:8]
    assert re.search(rf"worker 0 \(this process\) on node \S+ \(id {head}\), worker 1 on node \S+ \(id {second}\), "
                     rf"worker 2 on node \S+ \(id {second}\), worker 3 on node \S+ \(id {head}\);", synced), synced
    assert len(cluster.workers("head")) == 1 and len(cluster.workers("second")) == 2
    run.kill()
    run.wait(timeout=30)
    deadline = time.monotonic() + 60
    while (cluster.workers("head") or cluster.workers("second")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.workers("head") and not cluster.workers("second")
