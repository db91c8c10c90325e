"""The ``mlflow`` hook: a run logged to MLflow, a tracking server or a local store.

Each run becomes an MLflow run in the experiment ``experiment`` (default: the
run's name), named ``run_name`` (default: its run directory's, ``version_N``)
and tagged ``sigma.directory`` with that directory. It logs

- parameters: the run file as the run resolved it, every component's
  default filled in (:func:`sigmann_help.resolved_config`, what ``sigma train
  --print-config`` prints), flattened to dotted keys (``optimiser.beta1``,
  ``network.layers.1.size``), each value as TOML writes it;
- metrics named ``<event>/<name>`` after the ``metrics`` hook's records
  (:func:`sigma_core.record`): ``iteration/cost`` and
  ``iteration/learning_rate`` every ``every`` iterations, at step = iterations
  trained; ``epoch/cost``, ``epoch/validation.accuracy``, ``epoch/validation.cost``,
  ``epoch/learning_rate``, ``epoch/iterations_per_s`` and ``epoch/seconds``
  after each epoch, at step = the epoch, as the progress lines number it;
- when the run ends, with ``artifacts``: ``run.toml``, the resolved run file
  (``sigma train run.toml`` trains the run again); the final checkpoint in
  ``checkpoints/`` (``sigma train run.toml --resume`` continues it); and, when
  safetensors is installed, its export in ``export/``. The MLflow run is then
  FINISHED; one whose Sigma run ended in an error is FAILED.

A run resumed from a checkpoint (``sigma train ... --resume``) continues its
MLflow run rather than make a new one: the hook records the MLflow run's id
as ``run_id`` in its table of the run config (:attr:`sigma_core.Hook.table`),
which checkpoints save, and a hook given ``run_id`` continues that run. Where
the table has none (a checkpoint from before this, or the hook given again
with ``--monitor``), it continues the run tagged with its run directory, where
the checkpoint was saved (:meth:`MlflowHook._run_to_continue`).

``tracking_uri`` is any MLflow tracking URI (``http://127.0.0.1:5000``,
``sqlite:///path/mlflow.db``, ``databricks``). Without one:
``MLFLOW_TRACKING_URI`` if it is set, else a local store in ``mlruns/``
beside the run directories (``runs/mlruns``): the database
``runs/mlruns/mlflow.db``, the artifacts in ``runs/mlruns/artifacts``. A
database, not MLflow's file store (``./mlruns`` as folders of files), because
MLflow 3 refuses the file store unless ``MLFLOW_ALLOW_FILE_STORE`` is set: it
is in maintenance mode, and a SQLite database is what MLflow itself now uses
by default (``sqlite:///mlflow.db``). See it with ``mlflow ui
--backend-store-uri sqlite:///runs/mlruns/mlflow.db``.

Threads: everything but a copy of the run config is done on the hook's own
thread (``threaded``), at its share of the interpreter while training runs
(:attr:`sigma_core.Hook.share`): resolving the run file (a tenth of a second
the first time in a process), importing MLflow (one to three seconds, once per
process) and every call to MLflow, so neither a slow or unreachable server nor
MLflow's import holds a step up. That thread still shares the interpreter with
training (an import holds it for milliseconds at a time, which no share can
pace), and MLflow's client spends 4-20 ms of it in Python per request, so the
hook starts late and asks rarely: the first time it sends, :data:`FLUSH_SECONDS`
into the run or at its end for a shorter one, it resolves the run file, imports
MLflow and makes the MLflow run; then metrics (iterations' and epochs') are
sent in batches every :data:`FLUSH_SECONDS` and at the end, never per epoch
(a checkpoint saved before the MLflow run is made does not name it: a run
resumed from one continues the MLflow run tagged with its directory); and
before a request to an ``http(s)`` server reached without a proxy it
opens one TCP connection, and to an ``http`` one asks for an answer
(:func:`refused`), so a server that is down or never answers costs a socket per
try rather than MLflow's import and HTTP stack.

A server that cannot be reached (down, refusing, slower than
:data:`REQUEST_SECONDS` a request) is named in one warning, once; the hook
keeps what it has not sent and tries again with backoff (1 s, doubling up to
:data:`LONGEST_BACKOFF`), on its own thread, while training goes on. MLflow's
own retries, minutes of them, are turned off for it (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
and ``MLFLOW_HTTP_REQUEST_TIMEOUT``, unless set). The end of the run waits up
to ``wait`` seconds (default 10) for the server; what it could not send then
is appended to ``mlflow-undelivered.jsonl`` in the run directory, a warning
says how much and where, and ``sigma mlflow-replay FILE`` sends it later
(:mod:`sigmann_mlflow.undelivered`). The final checkpoint is saved on the
hook's thread, in ``on_stop``, from the trainer the hook was given when it
attached: meanwhile the training thread waits for this hook's queue to empty,
so the trainer stands still while it is read.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import re
import socket
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from sigma_core import Hook, check_writable, checkpoint_path, describe, load_component, save_checkpoint
from sigmann_help import config_toml, resolved_config
from sigmann_monitors import MetricsHook, record

from sigmann_mlflow.undelivered import UNDELIVERED, keep_undelivered

log = logging.getLogger("sigma")

#: Seconds between batches of metrics (the run's end sends the last).
FLUSH_SECONDS = 5.0
#: The longest a request to the tracking server may take before it counts as failed (MLflow's own default: 120 s).
REQUEST_SECONDS = 5
#: The longest wait between two tries to reach a server that failed.
LONGEST_BACKOFF = 60.0
#: What MLflow takes in one request: metrics, parameters (its ``MAX_METRICS_PER_BATCH``, ``MAX_PARAMS_TAGS_PER_BATCH``).
BATCH_METRICS, BATCH_PARAMETERS = 1000, 100
#: The longest parameter value MLflow stores (its ``MAX_PARAM_VAL_LENGTH``); longer ones are cut.
PARAMETER_LENGTH = 6000
#: Characters MLflow allows in a parameter or metric name; any other becomes ``_`` (an initialiser's ``*.weights``).
_NOT_IN_NAMES = re.compile(r"[^/\w.\- ]")


class MlflowHook(Hook):
    """Logs the resolved run file, metrics per step and per epoch, and artifacts to MLflow; see the module docstring."""

    name = "mlflow"
    threaded = True
    argument_rules = {"every": "int >= 0", "wait": "real >= 0"}  # checked when built from a run file or --monitor

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None, run_name: str | None = None,
                 every: int = 10, artifacts: bool = True, wait: float = 10.0, run_id: str | None = None):
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.continues = run_id  # the MLflow run to continue: as recorded in a checkpoint's run config, or given
        self.every, self.artifacts, self.wait = every, artifacts, wait
        self.drain_seconds = wait + 5  # the hook gives up on the server after ``wait``; then it writes what it kept
        self.reads = {"on_iteration": ("cost",)}
        self.run_id = None  # the MLflow run's, once it is made
        self._pending: list = []  # metrics not sent yet
        self._open = False  # an MLflow run is made and not ended yet

    def attach(self, run):  # on the training thread, before the first step: what the hook's thread cannot do
        super().attach(run)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # this hook retries, off the training thread
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(REQUEST_SECONDS))
        self._trainer = run.trainer  # for the final checkpoint, read when the run has ended (module docstring)
        self._directory = directory = run.directory
        default = not (self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
        self._store = directory.parent.parent / "mlruns" if default else None  # runs/mlruns, beside runs/<name>/
        self._experiment = self.experiment or run.name
        self._run_name = self.run_name or directory.name
        self._tags = {"sigma.directory": str(directory.resolve())}
        self._resumed = run.values["total_iterations"] > 0  # from a checkpoint: continue its MLflow run
        self._config = copy.deepcopy(run.config)  # as it is now: resolved later, on the hook's thread (_send)
        self._pending, self._open, self.run_id, self._client, self._parameters = [], False, None, None, None
        if self.table is not None:  # --resume may have given it the checkpoint's run_id since the hook was built
            self.continues = self.table.setdefault("run_id", self.continues)  # the key made here, on the training
            # thread, so the hook's thread only sets its value: a checkpoint saved meanwhile never sees the table grow
        self._failure, self._backoff, self._retry_at = None, 0.0, 0.0  # the last failure to reach the server
        self._flushed = time.monotonic()  # when metrics were last sent (or tried)

    def on_start(self):  # the first request waits for the first batch of metrics (module docstring)
        self._uri, self._location = self.tracking_uri, None
        if self._store is not None:  # the default: a local database beside the run directories
            store = check_writable(self._store, folder=True, what="mlflow store").resolve()
            self._uri, self._location = f"sqlite:///{store / 'mlflow.db'}", (store / "artifacts").as_uri()

    def _create_run(self) -> None:
        """Make the MLflow run (and its experiment, if new) and log its parameters."""
        from mlflow.entities import Param

        client = self._client
        experiment = self._experiment_id(self._location)
        self.run_id = self.continues or (self._run_to_continue(experiment) if self._resumed else None)
        self._open, self._flushed = self.run_id is not None, time.monotonic()
        if self._open:  # its parameters are logged already (MLflow refuses to change one)
            client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = client.create_run(experiment, run_name=self._run_name, tags=self._tags).info.run_id
            self._open = True
            items = [Param(key, value) for key, value in self._parameters.items()]
            for start in range(0, len(items), BATCH_PARAMETERS):
                client.log_batch(self.run_id, params=items[start:start + BATCH_PARAMETERS])
        if self.table is not None:  # the checkpoints saved from now on continue this MLflow run
            self.table["run_id"] = self.run_id

    def _run_to_continue(self, experiment: str) -> str | None:
        """The MLflow run a resumed run continues: the newest tagged with its run directory, which its checkpoint
        holds (a resumed run trains on in the directory it was saved from)."""
        directory = self._tags["sigma.directory"].replace("'", "\\'")
        found = self._client.search_runs([experiment], filter_string=f"tags.`sigma.directory` = '{directory}'",
                                         order_by=["attributes.start_time DESC"], max_results=1)
        return found[0].info.run_id if found else None

    def _experiment_id(self, location: str | None) -> str:
        """The id of the experiment named ``self._experiment``, made (with its artifacts at ``location``) if new."""
        from mlflow.exceptions import MlflowException

        experiment = self._client.get_experiment_by_name(self._experiment)
        if experiment is None:
            try:
                return self._client.create_experiment(self._experiment, artifact_location=location)
            except MlflowException:  # another run made it meanwhile
                experiment = self._client.get_experiment_by_name(self._experiment)
                if experiment is None:
                    raise
        return experiment.experiment_id

    def on_iteration(self):
        values = self.run.values
        self._add(record("iteration", values), values["total_iterations"])
        if len(self._pending) >= BATCH_METRICS or time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self._send()

    def on_epoch(self, report):
        self._add(record("epoch", self.run.values, report), report.epoch)
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self._send()

    def on_stop(self):
        deadline = time.monotonic() + self.wait
        while not self._send() and self._retry_at < deadline:
            time.sleep(max(0.0, self._retry_at - time.monotonic()))
        if self._failure is not None:
            self._keep_undelivered()
            return
        if self.artifacts:
            self._log_artifacts()
        self._open = False
        self._client.set_terminated(self.run_id, "FINISHED")

    def detach(self):  # on the hook's thread; the run ended in an error, or this hook failed, if it is still open
        if self._open and self._failure is None:
            self._open = False
            self._client.set_terminated(self.run_id, "FAILED")

    def _send(self) -> bool:
        """Make the run if not made yet and send the pending metrics, unless waiting to try again; whether all got
        through. A failure is said once (the server named) and tried again later, each wait twice the last."""
        if time.monotonic() < self._retry_at:
            return False
        if self._parameters is None:  # the first time: what MLflow is to log as the run's parameters
            config = None if self._config is None else resolved_config(self._config)
            self._parameters, self._toml = (dict(parameters(config)), config_toml(config)) if config else ({}, None)
        try:
            refused(self._server())
            if self._client is None:  # MLflow is imported here, once a server answers
                from mlflow.tracking import MlflowClient

                self._client = MlflowClient(self._uri)  # None: MLFLOW_TRACKING_URI
            if self.run_id is None:
                self._create_run()
            self._flush()
        except Exception as error:  # noqa: BLE001  whatever stops delivery now may pass: kept, tried again
            if self._failure is None:
                log.warning("hook %r: cannot reach the MLflow tracking server %s (%s); what it logs is kept and "
                            "sent again with backoff while training goes on", self.name, self._server(), describe(error))
            self._failure, self._backoff = error, min(max(1.0, 2 * self._backoff), LONGEST_BACKOFF)
            self._retry_at = time.monotonic() + self._backoff
            return False
        if self._failure is not None:
            log.info("hook %r: the MLflow tracking server %s answers again", self.name, self._server())
        self._failure, self._backoff = None, 0.0
        return True

    def _server(self) -> str:
        return self._uri or os.environ.get("MLFLOW_TRACKING_URI", "(MLflow's default)")

    def _keep_undelivered(self) -> None:
        """Append what could not be sent to the run directory's :data:`UNDELIVERED` file and say so."""
        path = self._directory / UNDELIVERED
        keep_undelivered(path, {"tracking_uri": self._uri, "experiment": self._experiment, "run_name": self._run_name,
                                "run_id": self.run_id, "tags": self._tags, "params": self._parameters,
                                "metrics": [list(metric) for metric in self._pending]})
        log.warning("hook %r: the MLflow tracking server %s could still not be reached %s s after the run ended "
                    "(the failure is above); %d metrics%s not delivered, kept in %s; send them with: sigma "
                    "mlflow-replay %s", self.name, self._server(), self.wait, len(self._pending),
                    "" if self.run_id else f" and {len(self._parameters)} parameters", path, path)

    def _add(self, row: dict, step: int) -> None:
        """Keep ``row``'s metrics as (key, value, timestamp in ms, step), MLflow's ``Metric`` arguments."""
        milliseconds = int(row["time"] * 1000)
        self._pending += [(f"{row['event']}/{name}", float(value), milliseconds, step)
                          for name, value in row.items() if name not in MetricsHook.HEADER and value is not None]

    def _flush(self) -> None:
        """Send the pending metrics, batch by batch; what a failure leaves unsent stays pending."""
        from mlflow.entities import Metric

        self._flushed = time.monotonic()
        while self._pending:
            self._client.log_batch(self.run_id, metrics=[Metric(*metric) for metric in self._pending[:BATCH_METRICS]])
            del self._pending[:BATCH_METRICS]

    def _log_artifacts(self) -> None:
        """The final checkpoint (saved first, while the training thread waits), its export, the resolved run file."""
        trainer, log = self._trainer, self._client.log_artifact
        with tempfile.TemporaryDirectory(prefix="sigma-mlflow-") as folder:
            folder = Path(folder)
            checkpoint = save_checkpoint(trainer, self.run.config, checkpoint_path(folder, trainer))
            if self.run.config is not None and importlib.util.find_spec("safetensors") is not None:
                export_safetensors = load_component("exporter", "safetensors")  # what sigma export writes
                export = export_safetensors(checkpoint, folder / f"{checkpoint.stem}.safetensors")
                log(self.run_id, str(export), "export")
            log(self.run_id, str(checkpoint), "checkpoints")
            if self._toml is not None:
                (folder / "run.toml").write_text(self._toml, encoding="utf-8")
                log(self.run_id, str(folder / "run.toml"))


def refused(uri: str) -> None:
    """Raise the ``OSError`` of a TCP connection to an ``http(s)`` tracking server that refuses it (or does not
    accept it within :data:`REQUEST_SECONDS`), and for ``http``, of a ``HEAD /`` it does not answer within that
    time (a hung server); other stores, and servers behind a proxy, are left to MLflow. Waiting on a socket leaves
    the interpreter to training; MLflow's own failed request takes 4-20 ms of it in Python."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme in ("http", "https") and parts.hostname and not urllib.request.getproxies():
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=REQUEST_SECONDS) as connection:
            if parts.scheme == "http":  # any answer will do, even an error status
                connection.sendall(f"HEAD / HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode("ascii"))
                if not connection.recv(1):
                    raise ConnectionError("the server closed the connection without answering")


def parameters(table, prefix: str = ""):
    """A resolved run file's values as MLflow parameters: ``(dotted key, value as TOML writes it)``.

    Tables and arrays of tables are flattened (``network.layers.1.size``); other arrays are one value
    (``[28, 28]``); unset values (None) are left out.
    """
    items = table.items() if isinstance(table, dict) else enumerate(table)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, dict) or isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            yield from parameters(value, f"{name}.")
        elif value is not None:
            text = value if isinstance(value, str) else json.dumps(value)
            yield _NOT_IN_NAMES.sub("_", name), text[:PARAMETER_LENGTH]
