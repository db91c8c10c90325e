"""``sigma tune`` on the digits with a tiny network: a study, pruning, resume after kill -9, Ray tasks, bad input.

Trials run in worker processes (or Ray tasks) with the numpy handler, a
16-unit hidden layer and 1-4 epochs, so each trains in about a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sigma_core import ConfigError, cli_main, load_run_file

RUN = """
name = "tiny"
seed = 0
[handler]
name = "numpy"
dtype = "float32"
[data]
extractor = "sklearn"
name = "digits"
preprocess = [{{ normalise = {{ input_range = [0, 16] }} }}]
[[network.layers]]
type = "input"
shape = [64]
[[network.layers]]
type = "dense"
size = 16
activation = "relu"
[[network.layers]]
type = "dense"
size = 10
[[network.layers]]
type = "softmax_ce"
[initialisers]
"*.weights" = {{ type = "xavier" }}
[optimiser]
type = "adam"
learning_rate = 0.01
[training]
batch_size = 64
epochs = {epochs}
prefetch = 0
[[hooks]]
type = "metrics"
every = 0
[tune]
{tune}
"""


def run_file(folder: Path, tune: str, epochs: int = 3) -> Path:
    path = folder / "tiny_tune.toml"
    path.write_text(RUN.format(tune=tune, epochs=epochs))
    return path


def database(path: Path) -> Path:
    """Where sigma tune keeps the study of the run file ``path`` (run "tiny"): in the run's folder, under runs/."""
    return Path("runs", "tiny", path.with_suffix(".db").name).resolve()


def study_of(path: Path) -> optuna.Study:
    return optuna.load_study(study_name=path.stem, storage=f"sqlite:///{database(path)}")


def running(path: Path) -> dict:
    """Trial number -> its worker ("host:pid", once it has started) of the trials running now, read with sqlite3
    itself: opening an Optuna storage while sigma tune creates it would race it."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database(path)}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT t.number, a.value_json FROM trials t LEFT JOIN trial_user_attributes a "
                              "ON a.trial_id = t.trial_id AND a.key = 'worker' WHERE t.state = 'RUNNING'").fetchall()
    except sqlite3.Error:  # not made yet
        return {}
    return {number: json.loads(worker) if worker else None for number, worker in rows}


def counted(study) -> list:
    return [t for t in study.get_trials() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or t.state == TrialState.FAIL and "error" in t.user_attrs]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the trials' runs/ folders
    optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("tune, culprit", [
    ('"optimiser.learnin_rate" = { log_uniform = [1e-4, 1e-1] }', 'tune."optimiser.learnin_rate": the run file has no'),
    ('"network.layers[7].size" = { choice = [8, 16] }', 'tune."network.layers[7].size": the run file has no'),
    ('"optimiser.learning_rate" = { uniform = [0.5, 0.1] }', "is empty (low > high)"),
    ('"network.layers[1].size" = { choice = [] }', "choice is empty"),
    ('"network.layers[1].size" = { int = [0, 8] }', 'tune."network.layers[1].size": 0 is refused'),
    ('sampler = "bayes"\n"optimiser.learning_rate" = { uniform = [0.1, 0.2] }', "tune.sampler: expected one of"),
    ('trails = 5\n"optimiser.learning_rate" = { uniform = [0.1, 0.2] }', "unknown key tune.trails"),
    ('sampler = "grid"\n"optimiser.learning_rate" = { uniform = [0.1, 0.2] }', "grid"),
    ('"optimiser.learning_rate" = { uniform = [0.1, 0.2], log = true }', "uniform takes no 'log'"),
    ('objective = "accuracy"\n"optimiser.learning_rate" = { uniform = [0.1, 0.2] }', "tune.objective"),
    ("", "names nothing to search"),
])
def test_a_bad_tune_section_is_one_line_and_exit_2_before_any_trial(tmp_path, capsys, tune, culprit):
    path = run_file(tmp_path, tune)
    assert cli_main(["tune", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and culprit in err, err
    assert not database(path).exists() and not path.with_suffix(".db").exists()  # no study was opened


def test_a_study_on_the_digits_finds_a_clearly_better_trial_and_writes_its_run_file(tmp_path, capsys):
    path = run_file(tmp_path, 'trials = 8\nsampler = "random"\npruner = "none"\n'
                    '"optimiser.learning_rate" = { log_uniform = [1e-5, 3e-2] }\n'
                    '"network.layers[1].size" = { choice = [8, 32] }')
    assert cli_main(["tune", str(path), "--jobs", "2"]) == 0
    study = study_of(path)
    values = [t.value for t in study.get_trials()]
    assert len(values) == 8 and all(t.state == TrialState.COMPLETE for t in study.get_trials())
    assert study.best_value >= 0.8 and study.best_value - min(values) >= 0.3, values
    # Each trial trained as its own run, through the run file's metrics hook.
    for number in range(8):
        assert list(Path("runs").glob(f"tiny-trial-{number}/**/metrics.jsonl")), number
    # The best trial's run file trains as that trial did: its parameters, its run name, no [tune].
    out, err = capsys.readouterr()
    # Not a terminal: a line per trial as it ended, then the table as wide as it is (no column cut to fit 80
    # characters), then the best trial on a line of its own.
    lines = err.splitlines()
    assert sorted(line.split(":")[0] for line in lines[:8]) == [f"trial {n}" for n in range(8)], err  # 2 at once
    header = next(line for line in lines[8:] if "validation.accuracy" in line)
    assert header.startswith("┃ trial ┃") and header.endswith("┃ time ┃"), err
    assert lines[-1].startswith("└") and lines[-1].endswith("┘") and out.startswith("best: trial "), (err, out)
    best_file = tmp_path / "runs" / "tiny" / "tiny_tune-best.toml"  # in the run's folder, not the source tree
    assert str(best_file) in out and f"trial {study.best_trial.number}" in out
    config = load_run_file(best_file)
    assert "tune" not in tomllib.loads(best_file.read_text())
    assert config["optimiser"]["learning_rate"] == study.best_params["optimiser.learning_rate"]
    assert config["network"]["layers"][1]["size"] == study.best_params["network.layers[1].size"]
    assert config["name"] == "tiny-best"
    # The report: the table again, and Optuna's plots.
    assert cli_main(["tune", "--report", str(path), "--out", str(tmp_path / "plots")]) == 0
    assert f"{study.best_value:.4f}" in capsys.readouterr().out
    for suffix in ("history", "importances", "parallel"):
        png = tmp_path / "plots" / f"tiny_tune-{suffix}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_median_pruner_stops_a_hopeless_trial_after_its_first_epoch(tmp_path):
    path = run_file(tmp_path, 'trials = 3\npruner = "median"\nstartup_trials = 2\n'
                    '"optimiser.learning_rate" = { log_uniform = [1e-7, 1e-1] }', epochs=4)
    database(path).parent.mkdir(parents=True)
    study = optuna.create_study(study_name=path.stem, storage=f"sqlite:///{database(path)}", direction="maximize")
    for rate in (0.01, 0.01, 1e-7):  # two good trials first (jobs = 1: in this order), then a hopeless one
        study.enqueue_trial({"optimiser.learning_rate": rate})
    assert cli_main(["tune", str(path)]) == 0
    good, _, hopeless = study_of(path).get_trials()
    assert good.state == TrialState.COMPLETE and sorted(good.intermediate_values) == [1, 2, 3, 4]
    assert hopeless.state == TrialState.PRUNED and sorted(hopeless.intermediate_values) == [1]
    assert hopeless.intermediate_values[1] < good.intermediate_values[1] - 0.2
    # Its run says it was pruned, when and at what value (not "a stop command"), and the trial names its run.
    value = hopeless.intermediate_values[1]
    log = Path(hopeless.user_attrs["run"], "metrics.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["stopped"].startswith(f"pruned at epoch 1: validation.accuracy {value:.4f}")


def test_a_study_killed_mid_trial_continues_and_counts_each_trial_once(tmp_path):
    path = run_file(tmp_path, 'trials = 4\nheartbeat = 1\nsampler = "random"\npruner = "none"\n'
                    '"optimiser.learning_rate" = { log_uniform = [1e-3, 1e-1] }', epochs=3)
    command = [sys.executable, "-m", "sigma_core", "tune", str(path), "--jobs", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any(running(path).values()) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert any(running(path).values()), "no trial was seen training"
        os.kill(process.pid, signal.SIGKILL)  # the driver only: its workers notice and end themselves
    finally:
        process.kill()
        process.wait()
    cut = {t.number: t.params for t in study_of(path).get_trials() if t.state == TrialState.RUNNING}
    assert cut
    time.sleep(3.5)  # two heartbeats (and a second: SQLite keeps whole seconds): the cut-off trials are stale
    assert cli_main(["tune", str(path), "--jobs", "2"]) == 0
    trials = study_of(path).get_trials()
    assert len(counted(study_of(path))) == 4 and all(t.state != TrialState.RUNNING for t in trials)
    for number, params in cut.items():
        assert trials[number].state == TrialState.FAIL and "error" not in trials[number].user_attrs
        retries = [t for t in trials if t.user_attrs.get("retry_of") == number]
        assert len(retries) == 1 and retries[0].params == params and retries[0].state == TrialState.COMPLETE


@pytest.fixture
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)  # not another's
    yield ray
    ray.shutdown()


def test_ray_tasks_run_the_study_and_a_killed_worker_fails_only_its_trial(tmp_path, ray_instance):
    path = run_file(tmp_path, 'trials = 4\nsampler = "random"\npruner = "none"\n'
                    '"optimiser.learning_rate" = { log_uniform = [1e-3, 1e-1] }', epochs=3)
    with killing_the_first_training_worker(path) as killed:
        assert cli_main(["tune", str(path), "--ray", "auto", "--jobs", "2"]) == 0
    trials = study_of(path).get_trials()
    assert killed and trials[killed[0]].state == TrialState.FAIL
    assert "Ray task failed" in trials[killed[0]].user_attrs["error"]
    assert len(counted(study_of(path))) == 4
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3 and study_of(path).best_value > 0.4


def test_a_killed_worker_process_fails_only_its_trial_and_a_new_worker_trains_the_next(tmp_path):
    path = run_file(tmp_path, 'trials = 3\nsampler = "random"\npruner = "none"\n'
                    '"optimiser.learning_rate" = { log_uniform = [1e-3, 1e-1] }', epochs=3)
    with killing_the_first_training_worker(path) as killed:
        assert cli_main(["tune", str(path), "--jobs", "1"]) == 0
    trials = study_of(path).get_trials()
    assert killed == [0] and trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs["error"].endswith("was killed by SIGKILL")
    assert [t.state for t in trials[1:]] == [TrialState.COMPLETE] * 2
    assert trials[1].user_attrs["worker"] != trials[0].user_attrs["worker"]


@contextlib.contextmanager
def killing_the_first_training_worker(path: Path):
    """While the block runs, SIGKILL the worker of the first trial seen training; yields [its trial number]."""
    killed = []

    def kill():
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            time.sleep(0.05)
            for number, worker in running(path).items():
                if worker:
                    os.kill(int(worker.rpartition(":")[2]), signal.SIGKILL)
                    killed.append(number)
                    return

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    yield killed
    killer.join()


def test_the_core_reads_a_run_file_with_a_tune_section_and_still_refuses_unknown_sections(tmp_path):
    example = Path(__file__).resolve().parents[3] / "examples" / "digits_tune.toml"
    config = load_run_file(example)  # as sigma train does: the section registered by sigmann-tune passes
    assert config["tune"]["trials"] == 12 and config["optimiser"]["learning_rate"] == 0.003
    typo = tmp_path / "typo.toml"
    typo.write_text(example.read_text().replace("[tune]", "[tunes]"))
    with pytest.raises(ConfigError, match="unknown key tunes"):
        load_run_file(typo)
