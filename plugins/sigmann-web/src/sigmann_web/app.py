"""The dashboard's routes: the page, its files, and the JSON API under ``/api/`` (the README documents it).

``GET`` requests read; every ``POST`` changes something and needs the token
(see :mod:`sigmann_web.server`). Errors are ``{"error": message}`` with 400
(a bad value), 403 (no token, or a run shown from its files), 404 (no such
run) or 409 (not now: e.g. step while running, or the run has ended).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sigma_core import ConfigError, SigmaError

from .server import LOOPBACK_NAMES, STATIC, Page, dumps, is_loopback

#: Sent with every answer: no framing (clickjacking), no token in Referer headers, only our own scripts.
HEADERS = [(b"content-security-policy", b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
           (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
           (b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


def reply(value, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type="application/json")


def error(status: int, message: str) -> Response:
    return reply({"error": message}, status)


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
        server.flush()
        board, failed = board_or_error(request.query_params.get("run"))
        return failed or reply({"run": board.name, "records": board.records, "weights": board.weights})

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

    def post(action):
        async def endpoint(request):
            if not server.token_ok(request):
                return error(403, "this request changes the run, so it needs the token sigma printed at start-up: "
                                  "open the printed URL (with ?token=...) or send the X-Sigma-Token header")
            try:
                body = await request.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return error(400, "the request body must be a JSON object")
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
        return hook.predict(body.get("pixels"))

    def watch(hook, body):
        return {"keys": hook.watch(body.get("key"))}

    routes = [Route("/", index), Mount("/static", StaticFiles(directory=STATIC), name="static"),
              Route("/api/runs", runs), Route("/api/state", state), Route("/api/history", history),
              Route("/api/events", events)]
    routes += [Route(f"/api/{name}", post(action), methods=["POST"])
               for name, action in (("control", control), ("set", set_value), ("predict", predict), ("watch", watch))]
    middleware = [Middleware(SecurityHeaders)]
    if is_loopback(server.host):  # a page elsewhere cannot reach us through a DNS name it controls
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES))
    return Starlette(routes=routes, middleware=middleware, lifespan=server.lifespan)


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
