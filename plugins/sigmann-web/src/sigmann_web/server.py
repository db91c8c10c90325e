"""The dashboard's server: a Starlette app on uvicorn, on its own thread, shared by a process's web hooks.

Every ``web`` hook of a process that asks for the same host (and the same
port, or any) joins one server, and each run is a tab on its page. The page
and scripts talk to it only through the JSON API under ``/api/`` (the README
documents it); updates reach open pages as Server-Sent Events, coalesced four
times a second into one message per run, so ten open tabs cost the training
thread nothing: it only appends to its board's inbox (see :mod:`sigmann_web.board`).
A page that falls behind has its backlog replaced by a fresh snapshot.

Security: the server binds to 127.0.0.1 unless told otherwise (another
address is logged as a warning), answers only requests whose Host header
names a loopback address when bound to one (so a web page cannot reach it
by DNS rebinding), and refuses with 403 every ``POST`` (controls, edits,
drawings) that another site's page sends (its ``Origin`` or
``Sec-Fetch-Site`` says so) or that lacks the random token it prints at
start-up in a header: ``X-Sigma-Token`` (what the page sends, having read
the token from the ``?token=`` of its address, as Jupyter's does) or
``Authorization: Bearer``. A token in the query string is not taken for a
``POST``: a form or a "simple" request from any site could carry one, but
no other site's page can set a header without the server's leave (CORS),
and this server gives none.

It stops when its last run ends, after telling open pages, unless a hook
asked it to keep serving: then it stays up read-only until Ctrl-C at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import ipaddress
import itertools
import json
import logging
import math
import secrets
import socket
import sys
import threading
from pathlib import Path

from sigma_core import SigmaError

log = logging.getLogger("sigma")

STATIC = Path(__file__).parent / "static"
#: Seconds between two pushes of what changed to the open pages.
TICK = 0.25
#: Ticks between two keep-alive comments on every stream (15 s).
KEEP_ALIVE = 60
#: Messages a page may fall behind by before its backlog is replaced by a snapshot.
BACKLOG = 256
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1"]

_servers: list[Server] = []  # running servers of this process, shared by its web hooks
_lock = threading.Lock()  # guards _servers and each server's claims and stopping


def connect(host: str, port: int, keep_serving: bool = False) -> Server:
    """A running server for ``host``/``port`` (0: any), started if this process has none; the caller releases it."""
    with _lock:
        server = next((s for s in _servers if s.host == host and port in (0, s.port) and not s.stopping), None)
        if server is None:
            server = Server(host, port)
            server.start()
            _servers.append(server)
            atexit.register(server.at_exit)
        server.claims += 1
        server.keep_serving |= keep_serving
    return server


class Server:
    """One uvicorn server and the boards it shows; see the module docstring."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.token = host, secrets.token_urlsafe(18)
        self.boards: dict = {}  # run name -> Board (changed on the event loop's thread only)
        self.pages: set[Page] = set()
        self._sent: dict = {}  # run name -> its state as last sent, to send only changes
        self.claims, self.stopping, self.keep_serving = 0, False, False
        self.loop = self.thread = self.ready = None
        self.socket = bind(host, port)
        self.port = self.socket.getsockname()[1]
        if not is_loopback(host):
            log.warning("web: serving on %s:%d, reachable from other machines; anyone with the token can steer "
                        "the run", host, self.port)
        import uvicorn

        from .app import build_app

        config = uvicorn.Config(build_app(self), log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=2)
        self.uvicorn = uvicorn.Server(config)

    def url(self, with_token: bool = True) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if with_token else "")

    # -- running ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve on a daemon thread; returns once it accepts connections."""
        self.thread = threading.Thread(target=self.serve, daemon=True, name=f"sigma-web-{self.port}")
        self.thread.start()
        while not self.uvicorn.started:
            self.thread.join(0.01)
            if not self.thread.is_alive():
                raise SigmaError(f"web: the server on {self.host}:{self.port} failed to start")

    def serve(self, ready=None) -> None:
        """Serve on this thread until stopped (on the main thread, Ctrl-C stops it). ``ready()`` is called once the
        app has started, when uvicorn already handles Ctrl-C: announcing the address before could let a Ctrl-C
        arrive while uvicorn starts up."""
        self.ready = ready
        self.uvicorn.run(sockets=[self.socket])

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        self.loop = asyncio.get_running_loop()
        ticker = asyncio.create_task(self._tick())
        if self.ready is not None:
            self.ready()
        yield
        ticker.cancel()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop from any thread and wait for the server's thread."""
        with _lock:
            self._stopping()
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.loop.call_soon_threadsafe(self._close)
        if self.thread is not None:
            self.thread.join(timeout)

    def at_exit(self) -> None:
        """At interpreter exit: let the last answers go out; with ``keep_serving``, serve read-only until Ctrl-C."""
        if self.keep_serving and self.thread.is_alive():
            print(f"sigma web: training has ended; the dashboard stays up read-only at {self.url()} "
                  "(Ctrl-C to stop)", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while self.thread.is_alive():
                    self.thread.join(0.5)
        self.thread.join(3)  # it stops itself half a second after its last run ended
        self.stop()

    def _stopping(self) -> None:  # _lock held
        self.stopping = True
        if self in _servers:
            _servers.remove(self)

    # -- boards (any thread; applied on the loop's thread) ----------------------------------------------
    def add(self, board) -> None:
        if self.loop is None:
            self._add(board)
        else:
            self.loop.call_soon_threadsafe(self._add, board)

    def _add(self, board) -> None:
        base, n = board.name, 1
        while board.name in self.boards:
            n += 1
            board.name = f"{base}-{n}"
        self.boards[board.name] = board
        self.broadcast({"type": "add", **board.snapshot()})

    def release(self, board) -> None:
        """A run has ended: tell its pages, and stop once no run is left (unless keeping on serving)."""
        with _lock:
            self.claims -= 1
        with contextlib.suppress(RuntimeError):  # the loop is gone: nothing left to tell
            self.loop.call_soon_threadsafe(self._released)

    def _released(self) -> None:
        self.flush()
        self.loop.call_later(0.5, self._stop_if_idle)  # let answers to the last requests go out first

    def _stop_if_idle(self) -> None:
        with _lock:
            if self.claims or self.keep_serving or self.stopping:
                return
            self._stopping()
        self._close()

    def _close(self) -> None:
        self.flush()
        for page in self.pages:
            page.close()
        self.uvicorn.should_exit = True

    # -- pushing updates (the loop's thread) -----------------------------------------------------------
    async def _tick(self) -> None:
        for tick in itertools.count(1):
            await asyncio.sleep(TICK)
            if self.uvicorn.should_exit:  # Ctrl-C on `sigma dashboard`: end the streams, so it stops at once
                self._close()
            try:
                self.flush()
            except Exception:  # a bug here must not stop the updates for good
                log.exception("web: pushing updates failed")
            if tick % KEEP_ALIVE == 0:  # keeps proxies from closing a quiet stream
                for page in self.pages:
                    page.send(": keep-alive\n\n")

    def flush(self) -> None:
        """Send every open page what changed in each run since the last flush."""
        for board in list(self.boards.values()):
            board.pump()
            update, state = board.take(), board.state()
            encoded = dumps(state)
            if update is None and encoded == self._sent.get(board.name):
                continue
            self._sent[board.name] = encoded
            self.broadcast({"type": "update", "run": board.name, "state": state, **(update or {})})

    def broadcast(self, message: dict) -> None:
        text = dumps(message)
        for page in self.pages:
            page.send(f"data: {text}\n\n")

    def snapshot(self) -> str:
        return f"data: {dumps({'type': 'snapshot', 'runs': [b.snapshot() for b in self.boards.values()]})}\n\n"

    def board(self, name):
        """The board ``name`` names (the only one when ``name`` is None), or a LookupError naming the runs."""
        if name is None and len(self.boards) == 1:
            return next(iter(self.boards.values()))
        if name in self.boards:
            return self.boards[name]
        runs = ", ".join(self.boards) or "none yet"
        raise LookupError(f"no run {name!r}; runs: {runs}" if name is not None else
                          f"several runs: name one with run (runs: {runs})")

    def token_ok(self, request) -> bool:
        """Whether ``request`` carries the token in a header (never the query string: see the module docstring)."""
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        given = request.headers.get("x-sigma-token") or (bearer.strip() if scheme.lower() == "bearer" else "")
        return secrets.compare_digest(given.encode(), self.token.encode())

    @staticmethod
    def foreign(request) -> str | None:
        """Why ``request`` comes from another site's page, or None: a browser says where a request comes from in
        ``Sec-Fetch-Site`` and ``Origin`` (scripts send neither, which is fine: they need the token)."""
        site = request.headers.get("sec-fetch-site")
        if site not in (None, "same-origin", "none"):
            return f"refused: a request from another site's page (Sec-Fetch-Site: {site}) cannot steer the run"
        origin, host = request.headers.get("origin"), request.headers.get("host", "")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return f"refused: a request from another site's page (Origin: {origin}) cannot steer the run"
        return None


class Page:
    """One open page's event stream: a bounded backlog of encoded messages."""

    def __init__(self):
        self.backlog = collections.deque()
        self.wake = asyncio.Event()
        self.resync = self.closed = False

    def send(self, text: str) -> None:
        if len(self.backlog) >= BACKLOG:  # it fell behind: it gets a fresh snapshot instead
            self.backlog.clear()
            self.resync = True
        else:
            self.backlog.append(text)
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (0: a free port), or a one-line error naming the address.

    Listening from here on, not only once uvicorn serves, makes the printed URL
    answer at once: early connections wait in the backlog instead of being refused.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except (OSError, OverflowError) as error:  # OverflowError: a port outside 0..65535
        sock.close()
        raise SigmaError(f"web: cannot listen on {host}:{port} ({getattr(error, 'strerror', None) or error})") from None
    return sock


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def dumps(value) -> str:
    """JSON with NaN and infinities as null (JavaScript's JSON.parse refuses them)."""
    return json.dumps(_finite(value), separators=(",", ":"))


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
