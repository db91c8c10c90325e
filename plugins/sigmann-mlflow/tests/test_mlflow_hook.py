"""The mlflow hook against real MLflow stores (a SQLite database, a ``mlflow server``), read back by MLflow's client."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request

import numpy
import pytest
from mlflow.tracking import MlflowClient
from safetensors.numpy import load_file

from sigma_core import build_run, cli_main, load_checkpoint, load_run_file
from sigmann_help import resolved_config

@pytest.fixture
def run_file(sigma_run_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run directories, runs/blobs/version_N, go here
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return sigma_run_file("optimiser.type=momentum")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """One SQLite store for the module's tests (making one takes seconds); each test has its own experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def only_run(client, experiment: str):
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1
    return runs[0]


def history(client, run, key) -> dict:
    return {metric.step: metric.value for metric in client.get_metric_history(run.info.run_id, key)}


def without_unset(table):
    """A resolved run file as TOML reads it back: TOML has no null."""
    if isinstance(table, dict):
        return {key: without_unset(value) for key, value in table.items() if value is not None}
    return [without_unset(item) for item in table] if isinstance(table, list) else table


def test_monitor_logs_the_resolved_run_file_every_metric_and_the_artifacts(run_file, database, tmp_path):
    out = tmp_path / "metrics"
    assert cli_main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{out}',every=3",
                     "--monitor", f"mlflow:tracking_uri='{database}',experiment='cli',every=3"]) == 0
    client = MlflowClient(database)
    run = only_run(client, "cli")
    assert (run.info.status, run.info.run_name) == ("FINISHED", "version_0")
    assert run.data.tags["sigma.directory"] == str((tmp_path / "runs" / "blobs" / "version_0").resolve())

    parameters = run.data.params  # the run file's values, and the defaults of what it names
    assert parameters["optimiser.type"] == "momentum" and parameters["optimiser.learning_rate"] == "0.1"
    assert parameters["optimiser.weight_decay"] == "0.0" and parameters["training.shuffle"] == "true"
    assert parameters["network.layers.1.size"] == "3" and parameters["network.layers.1.activation"] == "none"
    assert parameters["network.layers.0.shape"] == "[5]" and parameters["operator.type"] == "single_worker"

    records = [record for line in (out / "metrics.jsonl").read_text().splitlines()
               if (record := json.loads(line))["event"] in ("iteration", "epoch")]
    logged = 0
    for record in records:  # every value the metrics hook wrote, at the same step, in full precision
        step = record["step"] if record["event"] == "iteration" else record["epoch"]
        for name, value in record.items():
            if name not in ("time", "event", "epoch", "iteration", "step"):
                assert history(client, run, f"{record['event']}/{name}")[step] == value
                logged += 1
    assert sorted(history(client, run, "iteration/cost")) == [3, 6, 9, 12, 15, 18]
    assert sorted(history(client, run, "epoch/validation.accuracy")) == [1, 2] and logged == 6 * 2 + 2 * 6

    folder = tmp_path / "artifacts"
    client.download_artifacts(run.info.run_id, "", str(folder))
    monitors = [{"type": "metrics", "directory": str(out), "every": 3},
                {"type": "mlflow", "tracking_uri": database, "experiment": "cli", "every": 3}]  # --monitor's too
    assert tomllib.loads((folder / "run.toml").read_text()) == without_unset(resolved_config(
        {**load_run_file(run_file), "hooks": monitors}))
    checkpoint = load_checkpoint(folder / "checkpoints" / "blobs-e2-i0.ckpt")
    assert (checkpoint.trainer["epoch"], checkpoint.trainer["total_iterations"]) == (2, 18)
    export = load_file(folder / "export" / "blobs-e2-i0.safetensors")
    assert export.keys() == checkpoint.parameters.keys()
    for key, array in export.items():
        numpy.testing.assert_array_equal(array, checkpoint.parameters[key])


def test_a_run_files_monitors_table_defaults_to_a_store_beside_the_run_directories(run_file, monkeypatch):
    """The default store is runs/mlruns (a SQLite database: MLflow 3 refuses its file store), and MLflow is called
    only on the hook's own thread. ([[monitors]], the older name of [[hooks]], is read the same way.)"""
    run_file.write_text(run_file.read_text() + '\n[[monitors]]\ntype = "mlflow"\n')
    threads = set()
    for method in ("create_run", "log_batch", "log_artifact", "set_terminated"):
        original = getattr(MlflowClient, method)

        def recorded(self, *arguments, original=original, **keywords):
            threads.add(threading.current_thread())
            return original(self, *arguments, **keywords)

        monkeypatch.setattr(MlflowClient, method, recorded)
    run = build_run(load_run_file(run_file))
    summary = run.train()
    assert threads and threading.main_thread() not in threads

    store = run_file.parent / "runs" / "mlruns"
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    assert client.get_experiment_by_name("blobs").artifact_location == (store / "artifacts").as_uri()
    logged = only_run(client, "blobs")
    accuracies = {epoch["epoch"]: epoch["accuracy"] for epoch in summary["history"]}
    assert history(client, logged, "epoch/validation.accuracy") == accuracies
    assert history(client, logged, "epoch/cost") == {r["epoch"]: r["cost"] for r in summary["history"]}
    assert sorted(path.name for path in (store / "artifacts" / logged.info.run_id / "artifacts").iterdir()) == [
        "checkpoints", "export", "run.toml"]


def answer(listening: socket.socket) -> None:
    """Answer the next request on ``listening`` (after the one left waiting) as an HTTP server that has no page."""
    listening.accept()[0].close()  # the connection refused() gave up on
    connection = listening.accept()[0]
    with connection:
        connection.recv(1024)
        connection.sendall(b"HTTP/1.0 404 Not Found\r\n\r\n")


def closed_port() -> int:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def test_an_unreachable_server_is_named_once_and_what_it_missed_is_kept_to_be_sent_later(run_file, database, caplog,
                                                                                         capsys):
    """No server on the port: one warning names it, training goes on, the end waits ``wait`` seconds, then says
    what was not delivered and where it is; ``sigma mlflow-replay`` sends it to a store that works."""
    uri = f"http://127.0.0.1:{closed_port()}"
    with caplog.at_level(logging.WARNING, logger="sigma"):
        assert cli_main(["train", str(run_file), "--quiet", "--out", "summary.json", "--monitor",
                         f"mlflow:tracking_uri='{uri}',experiment='later',every=3,wait=0.5"]) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"hook 'mlflow': cannot reach the MLflow tracking server {uri} (")
    assert warnings[0].endswith("); what it logs is kept and sent again with backoff while training goes on")
    kept = "runs/blobs/version_0/mlflow-undelivered.jsonl"
    assert re.fullmatch(rf"hook 'mlflow': the MLflow tracking server {re.escape(uri)} could still not be reached 0.5 s "
                        rf"after the run ended \(the failure is above\); 24 metrics and \d+ parameters not delivered, "
                        rf"kept in {kept}; send them with: sigma mlflow-replay {kept}", warnings[1]), warnings[1]
    assert json.loads((run_file.parent / "summary.json").read_text())["hook_failures"] == []  # not detached
    capsys.readouterr()

    assert cli_main(["mlflow-replay", "runs/blobs/version_0", "--tracking-uri", database]) == 0
    client = MlflowClient(database)
    run = only_run(client, "later")
    assert capsys.readouterr().out == f"sent 24 metrics to MLflow run {run.info.run_id} at {database}\n"
    assert run.info.status == "FINISHED" and run.data.params["optimiser.type"] == "momentum"
    assert sorted(history(client, run, "iteration/cost")) == [3, 6, 9, 12, 15, 18]
    assert sorted(history(client, run, "epoch/cost")) == [1, 2]
    assert not (run_file.parent / kept).exists() and (run_file.parent / f"{kept}.sent").exists()  # not sent twice


def test_replaying_a_file_that_is_not_the_hooks_or_to_a_server_still_down_is_one_line(tmp_path, capsys,
                                                                                       monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow would otherwise retry for minutes
    kept = tmp_path / "mlflow-undelivered.jsonl"
    kept.write_text('{"experiment": "x"}\n')
    assert cli_main(["mlflow-replay", str(kept)]) == 2
    assert capsys.readouterr().err == (f"error: {kept}: not a file the mlflow hook wrote (line 1.tracking_uri is "
                                       "missing)\n")
    record = {"tracking_uri": None, "experiment": "x", "run_name": "version_0", "run_id": None, "tags": {},
              "params": {"a": "1"}, "metrics": [["iteration/cost", 0.5, 0, 1]]}
    kept.write_text(json.dumps(record) + "\n")
    uri = f"http://127.0.0.1:{closed_port()}"
    assert cli_main(["mlflow-replay", str(tmp_path), "--tracking-uri", uri]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {kept}: could not send it to {uri} (MlflowException: ") and line.endswith(
        "); what was not sent is kept there, try again")
    assert json.loads(kept.read_text()) == record


def test_a_resumed_run_continues_its_mlflow_run_without_gaps_or_duplicates(run_file, database, capsys):
    assert cli_main(["train", str(run_file), "--quiet", "--monitor",
                     f"mlflow:tracking_uri='{database}',experiment='resumed',every=1"]) == 0
    command = shlex.split(capsys.readouterr().err.partition("train on with: ")[2].splitlines()[0])
    assert not any("mlflow" in part for part in command)  # the checkpoint brings the hook back
    client = MlflowClient(database)
    first = only_run(client, "resumed").info.run_id
    checkpoint = load_checkpoint(command[command.index("--resume") + 1])
    assert [table["run_id"] for table in checkpoint.config["hooks"] if table["type"] == "mlflow"] == [first]
    client.delete_tag(first, "sigma.directory")  # found by the id the checkpoint holds, not by its directory
    assert cli_main([*command[1:], "--quiet"]) == 0  # to epoch 4
    run = only_run(client, "resumed")
    assert run.info.status == "FINISHED" and run.info.run_id == first
    steps = [metric.step for metric in client.get_metric_history(run.info.run_id, "iteration/cost")]
    assert sorted(steps) == list(range(1, 37))
    assert sorted(history(client, run, "epoch/cost")) == [1, 2, 3, 4]


def test_a_run_files_mlflow_hook_continues_the_run_its_checkpoint_names(run_file, database, capsys):
    run_file.write_text(run_file.read_text() + f'\n[[hooks]]\ntype = "mlflow"\ntracking_uri = "{database}"\n'
                        'experiment = "run-file"\nevery = 1\n')
    assert cli_main(["train", str(run_file), "--quiet"]) == 0
    command = shlex.split(capsys.readouterr().err.partition("train on with: ")[2].splitlines()[0])
    client = MlflowClient(database)
    first = only_run(client, "run-file").info.run_id
    client.delete_tag(first, "sigma.directory")  # found by the id the checkpoint holds, not by its directory
    assert cli_main([*command[1:], "--quiet"]) == 0
    run = only_run(client, "run-file")  # one hook, the run file's, given its run_id back: not a second one
    assert run.info.status == "FINISHED" and run.info.run_id == first
    steps = [metric.step for metric in client.get_metric_history(first, "iteration/cost")]
    assert sorted(steps) == list(range(1, 37))
    assert sorted(history(client, run, "epoch/cost")) == [1, 2, 3, 4]
    assert "differs" not in capsys.readouterr().err  # the recorded run_id is no change of the run config


@pytest.fixture
def server(tmp_path):
    """A ``mlflow server`` on 127.0.0.1 and a free port, serving artifacts; stopped (its whole process group) after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination",
         str(tmp_path / "served")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # it starts in 5-10 s, a minute on a crowded machine
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_a_tracking_server_gets_the_metrics_and_the_artifacts(run_file, server, capsys):
    assert cli_main(["train", str(run_file), "--quiet", "--out", "summary.json",
                     "--monitor", f"mlflow:tracking_uri='{server}',every=4"]) == 0
    summary = json.loads((run_file.parent / "summary.json").read_text())
    client = MlflowClient(server)
    run = only_run(client, "blobs")
    assert run.info.status == "FINISHED" and run.data.params["optimiser.type"] == "momentum"
    assert history(client, run, "epoch/cost") == {r["epoch"]: r["cost"] for r in summary["history"]}
    assert sorted(history(client, run, "iteration/cost")) == [4, 8, 12, 16]
    assert sorted(artifact.path for artifact in client.list_artifacts(run.info.run_id)) == [
        "checkpoints", "export", "run.toml"]
    assert [artifact.path for artifact in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/blobs-e2-i0.ckpt"]


def test_sigma_help_shows_the_hooks_arguments(capsys):
    assert cli_main(["help", "monitor", "mlflow"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("hook mlflow, from sigmann-mlflow 0.1.0\n")
    arguments = {line.split()[0]: line.split(maxsplit=1)[1] for line in shown.partition("\nArguments (")[2]
                 .partition("\n\n")[0].splitlines()[1:]}
    assert list(arguments) == ["tracking_uri", "experiment", "run_name", "every", "artifacts", "wait", "run_id"]
    assert re.fullmatch(r"a number >= 0\s+default 10.0", arguments["wait"])
    assert re.fullmatch(r"an integer >= 0\s+default 10", arguments["every"])
    assert re.fullmatch(r"true or false\s+default true", arguments["artifacts"])
    assert re.fullmatch(r"a string\s+default unset", arguments["tracking_uri"])


def test_metrics_go_in_batches_every_flush_seconds_and_at_the_end_never_per_epoch(run_file, database, monkeypatch):
    """MLflow's client takes the interpreter from training for each request: a short run makes one for its
    metrics, at the end, however many epochs it has."""
    from sigmann_mlflow import hook

    monkeypatch.setattr(hook, "FLUSH_SECONDS", 3600.0)
    batches = []
    original = MlflowClient.log_batch

    def recorded(self, run_id, metrics=(), **keywords):
        batches.extend([len(metrics)] if metrics else [])
        return original(self, run_id, metrics=metrics, **keywords)

    monkeypatch.setattr(MlflowClient, "log_batch", recorded)
    assert cli_main(["train", str(run_file), "--quiet", "--set", "training.epochs=3", "--monitor",
                     f"mlflow:tracking_uri='{database}',experiment='batched',every=3,artifacts=false"]) == 0
    client = MlflowClient(database)
    run = only_run(client, "batched")
    assert sorted(history(client, run, "epoch/cost")) == [1, 2, 3]
    assert sorted(history(client, run, "iteration/cost")) == list(range(3, 28, 3))
    assert len(batches) == 1


def test_a_server_that_refuses_connections_or_never_answers_costs_a_socket_not_an_mlflow_request(monkeypatch):
    """refused() raises the connection's error for an http(s) server that is down, and a timeout for an http one
    that accepts and never answers; other stores, and servers reached through a proxy, are MLflow's to try."""
    from sigmann_mlflow import hook
    from sigmann_mlflow.hook import refused

    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(hook, "REQUEST_SECONDS", 0.2)
    with pytest.raises(ConnectionRefusedError):
        refused(f"http://127.0.0.1:{closed_port()}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        uri = f"http://127.0.0.1:{listening.getsockname()[1]}"
        with pytest.raises(TimeoutError):
            refused(uri)  # the kernel accepted the connection; nothing reads or answers it
        answering = threading.Thread(target=answer, args=(listening,))
        answering.start()
        refused(uri)  # a server that answers, whatever it answers: nothing raised
        answering.join(5)
    refused("sqlite:///nowhere/mlflow.db")
    refused("databricks")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    refused(f"http://127.0.0.1:{closed_port()}")
