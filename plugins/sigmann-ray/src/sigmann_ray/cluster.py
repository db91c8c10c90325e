"""Joining Ray: a local instance, or an existing cluster by address, with Ray's token authentication.

Ray 2.59 and later turn token authentication on for clusters started with
``ray start --head``. A driver that joins such a cluster by address must run
in Ray's token mode (``RAY_AUTH_MODE=token``) and present the cluster's token
(``RAY_AUTH_TOKEN``, a file named by ``RAY_AUTH_TOKEN_PATH``, or
``~/.ray/auth_token``). Ray reads the mode when it is imported, so this
module imports Ray only after it has settled the environment: a token given
by ``token_file`` (a path; the token itself never enters the run file, a
log or a checkpoint) or by ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` turns
the token mode on.

Every failure to join is one line naming the address: nothing answers there
(found by a plain TCP connection within ``connect_timeout``, before Ray
would retry forever), the cluster refused this process (no token, or another
cluster's), or Ray gave up within ``connect_timeout`` for another reason.

Ray's own messages (its C++ connection warnings while joining, the Python
loggers under ``ray``, compiled-graph teardown tracebacks) go to one log file
per driver (:func:`log_path`), not to the user's terminal; workers' output
stays in Ray's session logs on their nodes (``log_to_driver=False``). Sigma's
error lines name that file.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from sigma_core import SigmaError

#: A local Ray instance runs its workers at the driver's priority: Ray's default (nice +15) leaves training
#: actors behind every other process on a busy machine, and behind their own driver.
LOCAL_RAY = {"worker_niceness": 0}
#: Seconds Ray takes, after its last retry, to fail ``ray.init`` (measured: about 0.6 s on a busy machine).
RAY_GIVES_UP = 1.0
#: Ray's default port for a head started with ``ray start --head`` and no ``--port``.
DEFAULT_PORT = 6379
TOKEN_HELP = ("supply the cluster's token (`ray get-auth-token` on its head node) in RAY_AUTH_TOKEN, in a file "
              "named by RAY_AUTH_TOKEN_PATH, or as token_file = \"PATH\" under [operator]")


def log_path() -> Path:
    """This driver's log of Ray's messages: ``<temp dir>/sigma-ray/driver-<pid>.log``."""
    return Path(tempfile.gettempdir()) / "sigma-ray" / f"driver-{os.getpid()}.log"


def join(address: str | None, *, token_file: str | None = None, connect_timeout: float = 30.0) -> str:
    """Connect this process to Ray (unless it already is) and return how to name the cluster in messages.

    Without ``address`` a local instance is started; ``"auto"`` joins the cluster
    this machine's ``ray start`` belongs to; ``host:port`` joins the cluster
    whose head listens there (``ray start --head --port``)."""
    deadline = time.monotonic() + connect_timeout  # the whole join: the probe, importing Ray, Ray's own retries
    where = f"the Ray cluster at {address}" if address else "this Ray instance"
    imported, mode = "ray" in sys.modules, os.environ.get("RAY_AUTH_MODE")
    if imported and sys.modules["ray"].is_initialized():
        return where
    token = _token_environment(address, token_file)
    if token and os.environ.get("RAY_AUTH_MODE") != "token":
        raise SigmaError(f"operator 'ray': a token is given but RAY_AUTH_MODE is {mode!r}; set RAY_AUTH_MODE=token "
                         f"to join {where}")
    if token and imported and mode != "token":
        raise SigmaError(f"operator 'ray': Ray was imported in this process before the token was given, and reads "
                         f"its authentication mode then; set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH in the "
                         f"environment before starting Sigma to join {where}")
    if address and address != "auto":
        _probe(address, connect_timeout)
    import ray  # only now: Ray reads RAY_AUTH_MODE when it is imported
    path = log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    if not address:
        settings["_system_config"] = LOCAL_RAY
    # Ray's retries, in whole seconds, end a second before the deadline: Ray takes about that to give up after them
    wait = {"RAY_gcs_server_port_wait_time_s": str(max(1, math.floor(deadline - time.monotonic() - RAY_GIVES_UP)))}
    wait = {name: value for name, value in wait.items() if name not in os.environ}  # the user's settings win
    try:
        with _stderr_to(path), mock.patch.dict(os.environ, wait):  # set meanwhile, restored after
            ray.init(address=address, **settings)
    except (ConnectionError, RuntimeError) as error:
        raise SigmaError(_why_not(address, where, token, connect_timeout, path, error)) from None
    _ray_logging_to(path)
    # Ray prints the raylets' error messages ("A worker died or was killed ...") to this process's stdout from a
    # thread of its own, whatever log_to_driver says; its debugger turns them off with this switch, and so does
    # this operator: the same events reach the user as Sigma's one line, and stay in the nodes' Ray logs.
    if hasattr(ray._private.worker, "_worker_logs_enabled"):
        ray._private.worker._worker_logs_enabled = False
    return where


def _token_environment(address: str | None, token_file: str | None) -> bool:
    """Put a token given by ``token_file`` where Ray looks (``RAY_AUTH_TOKEN_PATH``) and turn the token mode on
    if any token was given; returns whether one was. Only for a cluster joined by address (a local instance
    makes its own token)."""
    if not address:
        return False
    if token_file is not None:
        path = Path(token_file).expanduser().resolve()
        try:
            if not path.read_text().strip():
                raise SigmaError(f"operator 'ray': token_file {token_file!r} is empty")
        except OSError as error:
            raise SigmaError(f"operator 'ray': cannot read token_file {token_file!r}: "
                             f"{error.strerror or error}") from None
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    token = bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"))
    if token:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    return token


def _probe(address: str, timeout: float) -> None:
    """One line if nothing accepts a connection at ``address`` within ``timeout`` (Ray would retry forever)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address.startswith("ray://"):
        raise SigmaError(f"operator 'ray': address {address!r} is a Ray Client address; give the head's own "
                         f"address instead (host:port, as `ray start --head` prints it: ray start --address=...)")
    if not host or not port.isdigit():
        host, port = address, str(DEFAULT_PORT)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        reason = (f"no answer within {timeout:g} s, connect_timeout" if isinstance(error, TimeoutError)
                  else error.strerror or str(error))
        raise SigmaError(f"operator 'ray': no Ray cluster answers at {host}:{port} ({reason}); start one there with "
                         f"`ray start --head --port {port}`, or correct address") from None


def _why_not(address, where, token: bool, timeout: float, path: Path, error: BaseException) -> str:
    """The one line for a failed ray.init: a refused token, a missing one, or Ray's own reason."""
    said = path.read_text(errors="replace") if path.exists() else ""
    if "Unauthenticated" in said or "InvalidAuthToken" in said:
        if token:
            return (f"operator 'ray': {where} refused this process's authentication token: it is not this "
                    f"cluster's (`ray get-auth-token` on its head node prints the right one); Ray's messages: {path}")
        return (f"operator 'ray': {where} needs its authentication token (token authentication is on, as "
                f"`ray start --head` does since Ray 2.59): {TOKEN_HELP}; Ray's messages: {path}")
    return (f"operator 'ray': could not join {where} within {timeout:g} s (connect_timeout): "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
            f"{'' if token else ' (if it uses token authentication: ' + TOKEN_HELP + ')'}; Ray's messages: {path}")


@contextlib.contextmanager
def _stderr_to(path: Path):
    """File descriptor 2 (where Ray's C++ code writes while it connects) appended to ``path`` meanwhile."""
    sys.stderr.flush()
    saved, log = os.dup(2), os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def _ray_logging_to(path: Path) -> None:
    """Ray's Python loggers write to ``path`` instead of the terminal (teardown tracebacks included)."""
    logger = logging.getLogger("ray")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
    if not any(isinstance(handler, logging.FileHandler) for handler in logger.handlers):
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.propagate = False
