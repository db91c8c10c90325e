"""The dashboard's routes: the page, its files, and the JSON API under ``/api/`` (the README documents it).

``GET`` requests read; every ``POST`` changes something. Before a ``POST``
acts, in this order, each refused with a JSON error: it must not come from
another site (:meth:`~sigmann_web.server.Server.foreign`) and must carry
the token in a header (:meth:`~sigmann_web.server.Server.token_ok`); its body
is read only up to :data:`MAX_BODY` bytes (a ``Content-Length`` above that is
refused before anything is read, a body sent without one once it has passed
it); it must be a JSON object nested at most :data:`MAX_DEPTH` deep whose
fields have the types :data:`FIELDS` gives its endpoint (an unknown field is
refused by name). Errors are ``{"error": message}``, one line, with 400 (a bad
body or value, an image outside the run's folder), 403 (no token, another site,
or a run shown from its files), 404 (no such run, route or image), 405 (a wrong method), 409 (not now: e.g. step
while running, or the run has ended) or 413 (a body too large); never a 500.
"""

from __future__ import annotations

import json
import math

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import ClientDisconnect
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sigma_core import ConfigError, SigmaError, one_line, require

from .server import LOOPBACK_NAMES, STATIC, Page, dumps, is_loopback

#: Sent with every answer: no framing (clickjacking), no token in Referer headers, only our own scripts.
HEADERS = [(b"content-security-policy", b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
           (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
           (b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


#: The largest request body read, in bytes: the page sends a drawing's strokes in a few kB (some 12 bytes a
#: point); 1 MiB also holds drawings of some 50,000 pixels (224×224) sent as pixels (some 19 bytes a pixel).
MAX_BODY = 1 << 20
#: How deeply a request body may nest: an object holding rows of pixels is 3.
MAX_DEPTH = 3
#: Each endpoint's required fields and optional ones, with their rules (:func:`sigma_core.require`); every
#: endpoint also takes ``run``, the run's name.
FIELDS = {
    "control": ({"action": "str"}, {"epochs": "int >= 1", "save": "bool"}),
    "set": ({"key": "str", "value": "any"}, {}),  # held against the setting's own rule, named by its key
    "predict": ({}, {"strokes": "array", "pixels": "array"}),  # one of them: the hook says so
    "watch": ({"key": "str"}, {}),
}


class Refused(Exception):
    """A request refused before it acts: the status and the one-line message to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def reply(value, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type="application/json")


def error(status: int, message: str) -> Response:
    return reply({"error": one_line(message)}, status)


def build_app(server) -> Starlette:
    """The ASGI app of ``server`` (a :class:`~sigmann_web.server.Server`)."""

    def board_or_error(name):
        try:
            return server.board(name), None
        except LookupError as missing:
            return None, error(404, str(missing))

    async def index(request):
        return FileResponse(STATIC / "index.html")

    async def runs(request):
        server.flush()
        return reply([{"run": b.name, "live": b.live, "state": b.state()["state"]} for b in server.boards.values()])

    async def state(request):
        server.flush()
        board, failed = board_or_error(request.query_params.get("run"))
        return failed or reply({**board.state(), "info": board.info})

    async def history(request):
        """The run's chart points, or those between steps ``start`` and ``end`` (a zoomed chart), downsampled."""
        server.flush()
        board, failed = board_or_error(request.query_params.get("run"))
        if failed:
            return failed
        try:
            start, end = (step_bound(request.query_params, key) for key in ("start", "end"))
        except Refused as refused:
            return error(refused.status, str(refused))
        records = board.records if start is end is None else await run_in_threadpool(board.history, start, end)
        return reply({"run": board.name, "start": start, "end": end, "records": records, "weights": board.weights})

    async def events(request):
        server.flush()  # open pages get what is pending, so this page's snapshot and its updates do not overlap
        page = Page()
        server.pages.add(page)

        async def stream():
            try:
                yield server.snapshot()
                while True:
                    await page.wake.wait()  # an idle page costs nothing: no timers
                    page.wake.clear()
                    if page.resync:
                        page.resync = False
                        yield server.snapshot()
                    while page.backlog:
                        yield page.backlog.popleft()
                    if page.closed:
                        return
            finally:
                server.pages.discard(page)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def image(request):
        """A PNG the run publishes as the run value ``value`` (:mod:`sigmann_web.images`); the page adds ``v``,
        ignored here, so that a rewritten image gets a new address and is loaded again."""
        server.flush()
        board, failed = board_or_error(request.query_params.get("run"))
        if failed:
            return failed
        try:
            path = board.image(request.query_params.get("value"))
            data = await run_in_threadpool(path.read_bytes)
        except ValueError as refused:
            return error(400, str(refused))
        except (LookupError, OSError) as missing:  # OSError: gone since it was found
            return error(404, str(missing))
        # Another site's page may not even show it (an <img> needs no CORS): only the dashboard's own page.
        return Response(data, media_type="image/png", headers={"cross-origin-resource-policy": "same-origin"})

    def post(name, action):
        async def endpoint(request):
            try:
                foreign = server.foreign(request)
                if foreign:
                    raise Refused(403, foreign)
                if not server.token_ok(request):
                    raise Refused(403, "this request changes the run, so it needs the token sigma printed at "
                                       "start-up, in a header (X-Sigma-Token: TOKEN, or Authorization: Bearer "
                                       "TOKEN); the page sends it when opened at the printed address")
                body = validate(name, await read_json(request))
            except Refused as refused:
                return error(refused.status, str(refused))
            board, failed = board_or_error(body.get("run"))
            if failed:
                return failed
            if board.hook is None:
                return error(403, f"run {board.name!r} is shown from its metrics files: read-only")
            try:
                result = await run_in_threadpool(action, board.hook, body)
            except ConfigError as bad:
                return error(400, str(bad))
            except SigmaError as refused:
                return error(409, str(refused))
            server.flush()
            return reply({"ok": True, **result, "state": board.state()})

        return endpoint

    def control(hook, body):
        save = body.get("save") is True
        return {"message": hook.control(body.get("action"), epochs=body.get("epochs"), save=save)}

    def set_value(hook, body):
        return {"message": hook.set(body.get("key"), body.get("value"))}

    def predict(hook, body):
        return hook.predict(body.get("pixels"), body.get("strokes"))

    def watch(hook, body):
        return {"keys": hook.watch(body.get("key"))}

    routes = [Route("/", index), Mount("/static", StaticFiles(directory=STATIC), name="static"),
              Route("/api/runs", runs), Route("/api/state", state), Route("/api/history", history),
              Route("/api/events", events), Route("/api/image", image)]
    routes += [Route(f"/api/{name}", post(name, action), methods=["POST"])
               for name, action in (("control", control), ("set", set_value), ("predict", predict), ("watch", watch))]
    middleware = [Middleware(SecurityHeaders)]
    if is_loopback(server.host):  # a page elsewhere cannot reach us through a DNS name it controls
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES))
    return Starlette(routes=routes, middleware=middleware, lifespan=server.lifespan,
                     exception_handlers={HTTPException: http_error})


async def http_error(request, problem: HTTPException) -> Response:
    """Starlette's own refusals (no such route, a wrong method) as JSON errors, like every other answer's."""
    return error(problem.status_code, f"{request.method} {request.url.path}: {problem.detail}")


async def read_json(request) -> dict:
    """The body of ``request`` as a JSON object: read up to :data:`MAX_BODY` bytes, nested at most :data:`MAX_DEPTH`."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY:  # refused before a byte of it is read
        raise Refused(413, f"the request body is {int(length):,} bytes; at most {MAX_BODY:,} are read")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():  # a body sent without a length (chunked) is counted as it comes
            size += len(chunk)
            if size > MAX_BODY:
                raise Refused(413, f"the request body is over {MAX_BODY:,} bytes; at most {MAX_BODY:,} are read")
            chunks.append(chunk)
    except ClientDisconnect:  # nobody is left to answer, but the server's log stays clean
        raise Refused(400, "the client went away before its request body arrived") from None
    try:
        body = json.loads(b"".join(chunks), parse_int=json_integer)
    except RecursionError:  # the decoder's own limit, far deeper than MAX_DEPTH
        raise Refused(400, f"the request body is nested more than {MAX_DEPTH} deep") from None
    except ValueError as bad:  # not text (UTF-8, -16 or -32), or not JSON
        raise Refused(400, f"the request body is not JSON: {one_line(bad)}") from None
    if not isinstance(body, dict):
        raise Refused(400, f"the request body must be a JSON object, got {type(body).__name__}")
    if depth(body) > MAX_DEPTH:
        raise Refused(400, f"the request body is nested more than {MAX_DEPTH} deep")
    return body


def step_bound(query, key: str) -> float | None:
    """The query's ``key`` as a step (a finite number), None if absent, else :class:`Refused`."""
    given = query.get(key)
    try:
        step = None if given is None else float(given)
    except ValueError:
        step = math.nan
    if step is not None and not math.isfinite(step):
        raise Refused(400, f"{key} must be a step (a number), got {given!r}")
    return step


def json_integer(text: str):
    """A JSON integer as Python reads it, unless it has more digits than a float keeps exactly: then as
    JavaScript reads it, a float (infinite past 1e308, which every rule refuses), so that no integer is too
    large for a rule's comparison or for the float it becomes in the run."""
    return int(text) if len(text.lstrip("-")) < 16 else float(text)


def depth(value) -> int:
    """How deeply ``value`` nests arrays and objects (a number: 0, ``[1]``: 1); without recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, at = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, at + 1)
            pending.extend((inner, at + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return deepest


def validate(endpoint: str, body: dict) -> dict:
    """``body`` if its fields follow :data:`FIELDS`, else :class:`Refused` naming the first field that does not."""
    required, optional = FIELDS[endpoint]
    rules = {**required, **optional, "run": "str"}
    unknown = [field for field in body if field not in rules]
    if unknown:
        raise Refused(400, f"unknown field {unknown[0]!r}; POST /api/{endpoint} takes {', '.join(rules)}")
    try:
        require("", rules, body)
    except ConfigError as bad:
        raise Refused(400, str(bad)) from None
    missing = [field for field in required if field not in body]
    if missing:
        raise Refused(400, f"{missing[0]} is missing; POST /api/{endpoint} takes {', '.join(rules)}")
    return body


class SecurityHeaders:
    """ASGI middleware adding :data:`HEADERS` to every response (streams included)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
