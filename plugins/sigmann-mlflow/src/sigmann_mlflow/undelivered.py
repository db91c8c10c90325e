"""What the ``mlflow`` hook could not send by the end of a run, kept in the run directory, and ``sigma mlflow-replay``,
which sends it later.

Each run that could not reach its tracking server appends one JSON line to :data:`UNDELIVERED`: where it was to go
(``tracking_uri``, ``experiment``, ``run_name``, ``run_id`` if the MLflow run was made), its ``tags`` and
``params``, and its ``metrics`` as ``[key, value, timestamp in ms, step]``. Replaying makes the MLflow run where
none was made (else continues it), logs the parameters and metrics in MLflow's batch sizes, ends it FINISHED,
and renames the file to ``*.sent`` so that it is not sent twice.
"""

import json
from pathlib import Path

from sigma_core import SigmaError, atomic_write, check_readable, cli_options, describe, require

#: The file, in the run directory, that holds what the hook could not send.
UNDELIVERED = "mlflow-undelivered.jsonl"
#: What each of its lines holds, as :func:`sigma_core.require` checks it.
RECORD = {"tracking_uri": "str or null", "experiment": "str", "run_name": "str", "run_id": "str or null",
          "tags": "table", "params": "table", "metrics": "array"}


def keep_undelivered(path: Path, record: dict) -> None:
    """Append ``record`` (one run's undelivered parameters and metrics) to ``path`` as one JSON line."""
    with path.open("a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")


def register(cli) -> None:
    parser = cli.add_parser("mlflow-replay", parents=[cli_options.DEBUG],
                            help="send what the mlflow hook could not deliver during a run",
                            description="Send the parameters and metrics an unreachable MLflow tracking server "
                            f"missed (a run directory's {UNDELIVERED}) to the server now.")
    parser.add_argument("file", metavar="FILE|RUN_DIR", help=f"{UNDELIVERED}, or the run directory that holds it")
    parser.add_argument("--tracking-uri", metavar="URI", help="send them here instead of where the run sent them")
    parser.set_defaults(run=replay_command)


def replay_command(args) -> int:
    path = Path(args.file)
    path = check_readable(path / UNDELIVERED if path.is_dir() else path, SigmaError, "undelivered mlflow file")
    try:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for number, record in enumerate(records, start=1):
            require(f"line {number}", RECORD, record, complete=True)
    except (ValueError, SigmaError) as error:  # undecodable bytes and bad JSON are ValueErrors
        raise SigmaError(f"{path}: not a file the mlflow hook wrote ({error})") from None
    for index, record in enumerate(records):
        try:
            uri, run_id, count = replay(record, args.tracking_uri)
        except Exception as error:  # noqa: BLE001  a server still down, a metric MLflow refuses: one line
            with atomic_write(path, "w", what="undelivered mlflow file") as stream:  # what was sent goes
                stream.writelines(json.dumps(rest) + "\n" for rest in records[index:])
            raise SigmaError(f"{path}: could not send it to {args.tracking_uri or record['tracking_uri']} "
                             f"({describe(error)}); what was not sent is kept there, try again") from None
        print(f"sent {count} metrics to MLflow run {run_id} at {uri}")
    path.rename(path.with_name(path.name + ".sent"))
    return 0


def replay(record: dict, tracking_uri: str | None = None) -> tuple[str, str, int]:
    """Send one undelivered ``record`` to ``tracking_uri`` (default: the record's); (server, run id, metrics sent)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from sigmann_mlflow.hook import BATCH_METRICS, BATCH_PARAMETERS

    uri = tracking_uri or record["tracking_uri"]
    client = MlflowClient(uri)
    run_id = record["run_id"]
    if run_id is None:
        experiment = client.get_experiment_by_name(record["experiment"])
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(record["experiment"])
        run_id = client.create_run(experiment_id, run_name=record["run_name"], tags=record["tags"]).info.run_id
    params = [Param(key, value) for key, value in record["params"].items()]
    for start in range(0, len(params), BATCH_PARAMETERS):
        client.log_batch(run_id, params=params[start:start + BATCH_PARAMETERS])
    metrics = [Metric(*metric) for metric in record["metrics"]]
    for start in range(0, len(metrics), BATCH_METRICS):
        client.log_batch(run_id, metrics=metrics[start:start + BATCH_METRICS])
    client.set_terminated(run_id, "FINISHED")
    return uri or client.tracking_uri, run_id, len(metrics)
