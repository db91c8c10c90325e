"""The ``ray`` operator on a local Ray instance with 2 CPUs, shared by this module (Ray starts slowly)."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import ConfigError, Loop, NonFiniteError, SigmaError, build_run, load, operator_from_config
from sigma_core import config as run_config
from sigma_core.training.checkpoint import checkpoints
from sigma_core.hooks import Hook
from sigma_core.hooks.checkpoints import CheckpointHook

ROOT = Path(__file__).resolve().parents[3]
DIGITS = tomllib.loads((ROOT / "examples" / "digits.toml").read_text())


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    from sigmann_ray.operator import LOCAL_RAY  # as the operator starts a local instance

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, _system_config=LOCAL_RAY)
    yield ray
    ray.shutdown()


def digits_run(operator=None, epochs=1, batch_norm=False, **training):
    raw = copy.deepcopy(DIGITS)
    raw["network"]["layers"] = [layer for layer in raw["network"]["layers"] if layer["type"] != "dropout"]
    if batch_norm:  # on the inputs, so that its running statistics depend on the data alone (sigmann-vision)
        raw["network"]["layers"].insert(1, {"type": "batch_norm", "name": "norm"})
    raw["handler"] = {"name": "numpy", "dtype": "float64"}
    raw["training"].update(epochs=epochs, **training)
    raw["operator"] = operator or {}
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


def parameters(trainer) -> dict:
    return {pid: array.to_numpy().copy() for pid, array in trainer.network.parameters.items()}


def ray_loop(run, operator: dict, *, epochs, hooks=()) -> Loop:
    """A loop of ``run`` with the operator ``operator`` names: its actors build their runs from the run's config."""
    return Loop(run.trainer, operator_from_config(run.trainer, operator), epochs=epochs, hooks=hooks,
                config=run.config)


class AtIteration(Hook):
    """Calls ``act(hook)`` once, after the run's ``at``-th iteration."""

    def __init__(self, at, act):
        self.at, self.act, self.seen = at, act, 0

    def on_iteration(self):
        self.seen += 1
        if self.seen == self.at:
            self.act(self)


class SlowestStep(Hook):
    """The longest a step of the run took, from its start (fresh workers' first steps included): how long an
    answer may take on this machine now, under whatever load it has."""

    def on_start(self):
        self.last, self.slowest = time.monotonic(), 0.0

    def on_iteration(self):
        now = time.monotonic()
        self.slowest, self.last = max(self.slowest, now - self.last), now


def test_three_ray_workers_give_one_worker_on_the_whole_batch(ray_instance, caplog):
    single = digits_run(epochs=2)
    expected = [report.cost for report in Loop(single.trainer, epochs=2).run()]
    # Half a CPU each, so that 3 fit; batches of 32 split 10 + 11 + 11.
    run = digits_run({"type": "ray", "workers": 3, "cpus_per_worker": 0.5}, epochs=2)
    with caplog.at_level(logging.DEBUG, logger="sigma"):
        summary = run.train()
    # The workers took the global state once: every later step was the one started ahead, across the epoch too.
    assert len([r for r in caplog.records if "the workers take the global state" in r.getMessage()]) == 1
    assert [entry["cost"] for entry in summary["history"]] == pytest.approx(expected, rel=1e-12)
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)
    deadline = time.monotonic() + 30  # the run's actors were killed at its end: their CPUs come back
    while ray_instance.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray_instance.available_resources().get("CPU") == 2


def test_one_worker_is_the_driver_alone(ray_instance):
    single = digits_run()
    Loop(single.trainer, epochs=1).run()
    seen = []
    run = digits_run()
    ray_loop(run, {"type": "ray", "workers": 1}, epochs=1, hooks=[AtIteration(3, lambda hook: seen.append(
        (hook.run.loop.operator.actors, ray_instance.available_resources().get("CPU"))))]).run()
    assert seen == [([], 2)]  # no actor, no CPU taken from Ray
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)


def running_statistics(trainer) -> dict:
    return {key: array.to_numpy().copy() for key, array in trainer.network.state.items()}


# Layer state follows the threads operator's rule (its tests check that against the statistics computed from the
# batches): every step the driver takes the workers' running statistics weighted by their shares of the records.
# The two operators sum the same shard statistics in the same order, the threads one dividing by the shares' sum
# once more; each is a running average of T·B rows' statistics with weights summing to 1, bounded by the inputs
# (pixels in [0, 1]), so the two differ by at most eps·T·B. The driver's statistics left where they started (what
# it held before the workers sent them) miss by 0.75, and the workers' plain mean by 5e-4.
def test_the_driver_holds_the_workers_running_statistics_and_resumes_them_exactly(ray_instance, tmp_path):
    operator = {"type": "ray", "workers": 2}
    uninterrupted = digits_run(operator, epochs=2, batch_norm=True)
    uninterrupted.hooks += [CheckpointHook(tmp_path, keep=100), CheckpointHook(tmp_path, keep=100, every=7)]
    uninterrupted.train()
    reference = digits_run({"type": "threads", "workers": 2}, epochs=2, batch_norm=True)
    reference.train()
    steps, rows = reference.trainer.total_iterations, reference.config["training"]["batch_size"]
    expected = running_statistics(reference.trainer)
    for key, value in running_statistics(uninterrupted.trainer).items():
        np.testing.assert_allclose(value, expected[key], rtol=0, atol=np.finfo(np.float64).eps * steps * rows,
                                   err_msg=key)

    saved = [path for path in checkpoints(tmp_path, "digits")
             if path.name.startswith("digits-e1-i") and not path.name.endswith("-i0.ckpt")][0]  # mid-epoch 2
    resumed = digits_run(operator, epochs=2, batch_norm=True)
    resumed.resume(saved)
    resumed.train()
    final = uninterrupted.trainer.network.state_dict()
    for key, value in resumed.trainer.network.state_dict().items():  # parameters and running statistics
        np.testing.assert_array_equal(value, final[key], err_msg=key)

    # The last checkpoint holds them, and prediction from it (inference mode) is the driver's own, bit for bit.
    network = load(tmp_path / "digits-e2-i0.ckpt", handler="numpy")
    for key, value in running_statistics(uninterrupted.trainer).items():
        np.testing.assert_array_equal(network.state[key].to_numpy(), value, err_msg=key)
    images = np.random.default_rng(0).integers(0, 17, (50, 64)).astype(np.float64)  # raw pixels, 0..16
    np.testing.assert_array_equal(network.predict(images), uninterrupted.trainer.network.predict(images))


def slower():
    """After 5 iterations, halves the learning rate on the driver, as a schedule or a ``set`` command would."""
    return AtIteration(5, lambda hook: setattr(hook.run.optimiser, "learning_rate", hook.run.optimiser.learning_rate / 2))


def test_the_workers_follow_the_drivers_hyperparameters_and_a_second_run(ray_instance):
    single = digits_run(epochs=2)
    Loop(single.trainer, epochs=1, hooks=[slower()]).run()
    Loop(single.trainer, epochs=2).run()
    run, operator = digits_run(epochs=2), {"type": "ray", "workers": 2}
    ray_loop(run, operator, epochs=1, hooks=[slower()]).run()
    ray_loop(run, operator, epochs=2).run()  # new actors take the global state
    assert run.trainer.optimiser.learning_rate == single.trainer.optimiser.learning_rate
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)


def test_a_reset_mid_epoch_recompiles_and_repeats_the_run(ray_instance, caplog):
    single = digits_run(epochs=2)
    expected = [report.cost for report in Loop(single.trainer, epochs=2).run()]
    run = digits_run(epochs=2)
    loop = ray_loop(run, {"type": "ray", "workers": 2}, epochs=2,
                    hooks=[AtIteration(20, lambda hook: hook.run.command("reset"))])
    with caplog.at_level(logging.DEBUG, logger="sigma"):
        reports = loop.run()
    # Once at the start and once after the reset (the step started ahead was dropped, the graph compiled anew).
    assert len([r for r in caplog.records if "the workers take the global state" in r.getMessage()]) == 2
    assert [report.cost for report in reports] == pytest.approx(expected, rel=1e-12)
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)


def kill_worker_1(hook):
    """Kills worker 1's process (SIGKILL) from the driver, between two iterations (the driver is worker 0; worker 1
    is the first actor)."""
    import ray

    pid = ray.get(hook.run.loop.operator.actors[0].pid.remote())
    assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)  # not Ray's nice +15
    os.kill(pid, signal.SIGKILL)


def test_a_killed_worker_is_restarted_and_training_finishes(ray_instance, caplog):
    run = digits_run({"type": "ray", "workers": 2}, epochs=2)
    run.hooks.append(AtIteration(10, kill_worker_1))
    with caplog.at_level(logging.WARNING, logger="sigma"):
        summary = run.train()
    assert summary["epochs"] == 2 and np.isfinite(summary["cost"])
    assert run.trainer.total_iterations == 2 * len(run.trainer.training_iterator)
    # Killed after step 10; step 11 was already started ahead, so the loss shows in step 11 or, if worker 1 had
    # finished it, in step 12.
    restarts = [r.getMessage() for r in caplog.records
                if re.search(r"^ray worker 1 on node \S+ \(id \w{8}\) died \(\w+\) in global step 1[12]; ",
                             r.getMessage())]
    assert len(restarts) == 1 and "repeating the step from the last synchronised state" in restarts[0]
    single = digits_run(epochs=2)  # the repeated step started from the same state: nothing was lost or doubled
    Loop(single.trainer, epochs=2).run()
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)


def nan_in_worker_1(tmp_path, handler="numpy", **training):
    """A run of two Ray workers whose first batch has a NaN input in worker 1's rows (4-7 of 8, unshuffled)."""
    inputs = np.random.default_rng(0).random((8, 64))
    inputs[6, 3] = np.nan
    np.savez(tmp_path / "bad.npz", inputs=inputs, targets=np.arange(8) % 10)
    raw = copy.deepcopy(DIGITS)
    raw["data"] = {"extractor": "npz", "path": str(tmp_path / "bad.npz"), "allow_non_finite": True}
    raw["split"] = {"validation": [0, 2], "train": [0, 8]}
    raw["handler"] = {"name": handler, "dtype": "float64"}
    raw["training"].update(batch_size=8, shuffle=False, epochs=1, **training)
    raw["operator"] = {"type": "ray", "workers": 2}
    return build_run(run_config.validate(raw))


def test_a_worker_error_names_the_worker(ray_instance, tmp_path):
    run = nan_in_worker_1(tmp_path)
    with pytest.raises(NonFiniteError, match=r"^worker 1 failed: NonFiniteError: trainer 'digits': cost became nan"):
        run.train()


def test_a_debug_run_checks_every_workers_ops_and_names_the_op(ray_instance, tmp_path):
    """``debug:numpy`` (sigmann-debug) wraps the workers' handlers too: worker 1's NaN input is reported as the op
    that made the first NaN, not as the cost that later became one."""
    pytest.importorskip("sigmann_debug", reason="sigmann-debug provides the debug handler")
    run = nan_in_worker_1(tmp_path, "debug:numpy", compile="none")
    with pytest.raises(Exception, match=r"^worker 1 failed: \w+: debug: op '\w+' in layer .*forward.*nan at index"):
        run.train()


def test_more_workers_than_cpus_is_one_line(ray_instance):
    with pytest.raises(SigmaError, match=r"^operator 'ray': 3 workers need 3 CPUs, this Ray instance has 2$"):
        digits_run({"type": "ray", "workers": 3}).train()


def test_without_ray_the_operator_cannot_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what find_spec sees when Ray is not installed
    with pytest.raises(ConfigError, match=r"^operator: operator 'ray' cannot run here: Ray is not installed \(pip install ray\)$"):
        digits_run({"type": "ray"}).train()


def test_cli_reports_a_missing_ray_in_one_line(tmp_path):
    raw = (ROOT / "examples" / "xor.toml").read_text()
    config = tmp_path / "xor.toml"
    config.write_text(raw + '\n[operator]\ntype = "ray"\nworkers = 64\n')
    script = "import sys; sys.modules['ray'] = None; from sigma_core.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", script, "train", str(config), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("error: operator: operator 'ray' cannot run here: "
                                                    "Ray is not installed (pip install ray)")


def descendants(root: int) -> dict[int, str]:
    """The live processes under ``root``: pid -> command line."""
    table = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            state, parent = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[:2]
            command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if state != "Z":
            table[int(name)] = (int(parent), command)
    found, grown = {root}, True
    while grown:
        grown = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= grown
    return {pid: table[pid][1] for pid in found - {root} if pid in table}


@pytest.mark.slow
def test_with_no_restarts_a_lost_worker_on_this_node_is_one_line_and_status_2(tmp_path):
    """The compiled-graph path (the workers on the driver's node), through the CLI on its own local Ray: a
    worker killed mid-run ends the run in the documented exit status 2 and one line, without the crash
    (SIGSEGV while Ray shut down) that results read in place and kept alive by the error used to cause, and
    without Ray's messages on the terminal."""
    raw = (ROOT / "examples" / "digits.toml").read_text().replace("epochs = 20", "epochs = 200")
    (tmp_path / "run.toml").write_text(raw + '\n[operator]\ntype = "ray"\nworkers = 2\nrestarts = 0\n')
    script = "import sys; from sigma_core.cli import main; sys.exit(main())"
    environment = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    run = subprocess.Popen([sys.executable, "-c", script, "train", "run.toml", "--quiet", "--handler", "numpy"],
                           cwd=tmp_path,
                           env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in run.stderr:  # until the run says where its workers are: then it is training
        if "results through shared memory and a compiled graph" in line:
            break
    else:
        raise AssertionError(f"the run ended before training: {run.communicate()}")
    victim = min(pid for pid, command in descendants(run.pid).items() if command.startswith("ray::RayWorker"))
    os.kill(victim, signal.SIGKILL)
    out, err = run.communicate(timeout=120)  # what the run said after the line above
    assert run.returncode == 2, (run.returncode, err)  # not -11
    assert re.fullmatch(r"error: ray worker \d on node \S+ \(id \w{8}\) died \(\w+\) in global step \d+; giving up "
                        r"\(restarts = 0 allows none\); Ray's messages: \S+ and the nodes' Ray session logs",
                        err.strip().splitlines()[-1]), err
    assert len(err.strip().splitlines()) == 1 and "(raylet)" not in out, (out, err)


def test_a_frozen_worker_on_this_node_is_replaced_after_the_timeout(ray_instance, caplog):
    """A worker that stops answering (SIGSTOP: alive, but silent) while it shares the driver's node, where the
    results travel through a compiled graph, is treated as lost once ``timeout`` has passed: replaced, its step
    repeated, the run finished as a single worker would have. The timeout is twice the slowest step of a first
    run of the same workers, so that a loaded machine's slow answers are not taken for a frozen worker."""
    import ray

    frozen = []

    def freeze_worker_1(hook):
        frozen.append(ray.get(hook.run.loop.operator.actors[0].pid.remote()))
        os.kill(frozen[0], signal.SIGSTOP)

    baseline, slowest = digits_run({"type": "ray", "workers": 2}, epochs=1), SlowestStep()
    baseline.hooks += [slowest, AtIteration(5, lambda hook: hook.run.loop.signal_stop())]
    baseline.train()
    timeout = round(max(3.0, 2 * slowest.slowest), 1)  # a replacement's first step must fit: not a fixed 3 s
    run = digits_run({"type": "ray", "workers": 2, "timeout": timeout}, epochs=2)
    run.hooks.append(AtIteration(10, freeze_worker_1))
    try:
        with caplog.at_level(logging.WARNING, logger="sigma"):
            summary = run.train()
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert summary["epochs"] == 2 and run.trainer.total_iterations == 2 * len(run.trainer.training_iterator)
    restarts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ray worker 1 on node ")]
    assert len(restarts) == 1 and f"did not answer within {timeout:g} s (timeout)" in restarts[0], restarts
    single = digits_run(epochs=2)
    Loop(single.trainer, epochs=2).run()
    for pid, array in parameters(single.trainer).items():
        np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=1e-12, atol=1e-12, err_msg=pid)


class _StuckRead:
    """A compiled-graph output whose read ignores its time limit (as Ray 2.60's does when the writer froze
    holding the channel's lock) and ends only when the writer's process does."""

    def __init__(self, writer):
        self.writer = writer

    def get(self, timeout):
        from ray.exceptions import RayChannelError

        self.writer.wait()
        raise RayChannelError("channel closed")


class _Ready:
    def get(self, timeout):
        return "result"


def test_a_read_stuck_past_its_limit_kills_the_writer_and_says_it_did_not_answer():
    from sigmann_ray.exchange import GRACE_SECONDS, LostWorker, read_within

    writer = subprocess.Popen(["sleep", "600"])
    try:
        assert read_within(_Ready(), 0.2, writer.pid) == "result"
        time.sleep(0.2 + GRACE_SECONDS + 0.3)
        assert writer.poll() is None  # an answer in time cancels the timer
        began = time.monotonic()
        with pytest.raises(LostWorker, match=r"^did not answer within 0.2 s \(timeout\)$"):
            read_within(_StuckRead(writer), 0.2, writer.pid)
        assert time.monotonic() - began >= 0.2 + GRACE_SECONDS and writer.returncode == -signal.SIGKILL
    finally:
        writer.kill()
        writer.wait()
