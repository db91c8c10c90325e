"""What the web API refuses before it acts: other sites, tokens outside a header, bodies too large, too deep or of
the wrong types; and a fuzz test: whatever JSON a request carries, the answer is a 2xx or a 4xx with a JSON error."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sigma_core import SigmaError
from sigmann_web.app import MAX_BODY

PAUSE = {"action": "pause"}


def raw(run, head: bytes, body=b"", chunks=()) -> tuple[int, dict, float]:
    """Send a request over a plain socket (to say what httpx would not: a false length, endless chunks);
    returns the answer's status, its JSON and the seconds it took. Sending stops once the server stops reading."""
    started = time.monotonic()
    with socket.create_connection((run.server.host, run.server.port), timeout=10) as connection:
        try:
            connection.sendall(head + body)
            for chunk in chunks:
                connection.sendall(chunk)
        except OSError:  # the server answered and closed while the rest was on its way
            pass
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += connection.recv(65536)
        headers, _, content = answer.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in headers.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(content) < length:
            content += connection.recv(65536)
    return int(headers.split()[1]), json.loads(content), time.monotonic() - started


def head(run, *lines: str) -> bytes:
    return "\r\n".join(["POST /api/control HTTP/1.1", "Host: 127.0.0.1", f"X-Sigma-Token: {run.server.token}",
                        "Content-Type: application/json", *lines, "", ""]).encode()


def test_a_cross_origin_request_or_a_token_outside_a_header_changes_nothing(live):
    run = live()
    token, url = run.server.token, f"{run.base}/api/control"
    # What another site's page can send without asking: a "simple" POST, the token in the query string.
    simple = httpx.post(f"{url}?token={token}", content=json.dumps(PAUSE),
                        headers={"Content-Type": "text/plain", "Origin": "http://attacker.example"})
    assert simple.status_code == 403 and "Origin: http://attacker.example" in simple.json()["error"]
    query_only = httpx.post(f"{url}?token={token}", json=PAUSE)  # no Origin (a script): still no header token
    assert query_only.status_code == 403 and "in a header" in query_only.json()["error"]
    for headers, why in [({"Origin": "http://attacker.example"}, "Origin: http://attacker.example"),
                         ({"Origin": "null"}, "Origin: null"),  # a sandboxed frame, a file
                         ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"),
                         ({"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site: same-site")]:  # another port of this host
        refused = httpx.post(url, json=PAUSE, headers={"X-Sigma-Token": token, **headers})
        assert refused.status_code == 403 and why in refused.json()["error"], headers
    assert run.loop.state.value == "running"  # nothing changed
    own = {"Origin": run.base, "Sec-Fetch-Site": "same-origin"}  # the page itself
    assert httpx.post(url, json=PAUSE, headers={"X-Sigma-Token": token, **own}).json()["message"] == "paused"
    assert httpx.post(url, json={"action": "resume"},
                      headers={"Authorization": f"Bearer {token}"}).json()["message"] == "resumed"


def test_a_body_too_large_is_refused_by_its_length_before_a_byte_of_it_is_read(live):
    run = live()
    status, answer, seconds = raw(run, head(run, "Content-Length: 67108864"), b"{" + b" " * 1000)
    assert (status, answer) == (413, {"error": "the request body is 67,108,864 bytes; at most 1,048,576 are read"})
    assert seconds < 5  # not the 12 s of reading 64 MB


def test_a_body_without_a_length_is_refused_once_it_passes_the_limit(live):
    run = live()
    piece = b" " * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * (MAX_BODY // len(piece) * 4)  # 4 MiB, never all read
    status, answer, _ = raw(run, head(run, "Transfer-Encoding: chunked"), b"5\r\n{\"a\":\r\n", chunks)
    assert (status, answer) == (413, {"error": "the request body is over 1,048,576 bytes; at most 1,048,576 are read"})
    assert run.loop.state.value == "running"


@pytest.mark.parametrize("path, body, status, message", [
    ("control", b"[" * 50_000 + b"]" * 50_000, 400, "the request body is nested more than 3 deep"),
    ("control", {"action": "pause", "save": {"a": {"b": [1]}}}, 400, "the request body is nested more than 3 deep"),
    ("control", b"\xff\xfe{", 400, "the request body is not JSON: "),
    ("control", b"{\"action\": \"pause\"", 400, "the request body is not JSON: Expecting ',' delimiter"),
    ("control", [PAUSE], 400, "the request body must be a JSON object, got list"),
    ("control", {"action": 1}, 400, "action: expected a string, got 1"),
    ("control", {"action": "extend", "epochs": "5"}, 400, "epochs: expected an integer >= 1, got '5'"),
    ("control", {"action": "extend", "epochs": 10 ** 400}, 400, "epochs: expected an integer >= 1, got inf"),
    ("control", {"action": "stop", "save": "yes"}, 400, "save: expected true or false, got 'yes'"),
    ("control", {"action": "pause", "run": ["blobs"]}, 400, "run: expected a string, got ['blobs']"),
    ("control", {"actoin": "pause"}, 400, "unknown field 'actoin'; POST /api/control takes action, epochs, save, run"),
    ("control", {}, 400, "action is missing; POST /api/control takes action, epochs, save, run"),
    ("control", {"action": "pause", "run": "nope"}, 404, "no run 'nope'; runs: blobs"),
    ("set", {"key": {"x": 1}, "value": 1}, 400, "key: expected a string, got {'x': 1}"),
    ("set", {"key": "optimiser.learning_rate", "value": 1e400}, 400,
     "optimiser.learning_rate: expected a finite number >= 0, got inf"),
    ("set", {"key": "optimiser.learning_rate", "value": True}, 400,
     "optimiser.learning_rate: expected a finite number >= 0, got True"),
    ("predict", {"pixels": {"a": 1}}, 400, "pixels: expected an array, got {'a': 1}"),
    ("predict", {"pixels": [[0.5] * 8, "row"]}, 400, "pixels must be an array of numbers, or an array of rows"),
    ("watch", {"key": None}, 400, "key: expected a string, got None"),
])
def test_bad_bodies_are_400s_naming_what_is_wrong_and_change_nothing(live, path, body, status, message):
    run = live()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    refused = run.client.post(f"/api/{path}", content=content, headers={"Content-Type": "application/json"})
    assert refused.status_code == status and refused.json()["error"].startswith(message), refused.text
    assert run.loop.state.value == "running" and run.trainer.optimiser.learning_rate == 0.01


def test_routes_and_methods_it_does_not_have_are_json_errors(live):
    run = live()
    assert run.client.get("/api/control").json() == {"error": "GET /api/control: Method Not Allowed"}
    assert run.client.get("/api/control").status_code == 405
    missing = run.client.post("/api/nothing", json={})
    assert (missing.status_code, missing.json()) == (404, {"error": "POST /api/nothing: Not Found"})


# -- fuzzing ----------------------------------------------------------------------------------------------------

#: Any JSON value (NaN and the infinities too, which Python's json reads), a few levels deep.
ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                   lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                   max_leaves=12)
#: Bodies with the fields the endpoints read, their values now right, now anything (every action but stop,
#: which would leave only 409s to fuzz).
FIELDS = {
    "control": {"action": st.sampled_from(["start", "pause", "resume", "step", "reset", "extend", "fly"]) | ANY,
                "epochs": st.integers(-2, 3) | ANY, "save": st.booleans() | ANY},
    "set": {"key": st.sampled_from(["optimiser.learning_rate", "optimiser.momentum", "network.layers.3-dropout.p",
                                    "optimiser.freeze"]) | ANY,
            "value": st.floats() | st.integers() | ANY},
    "predict": {"pixels": st.lists(st.floats(0, 1), min_size=64, max_size=64) | ANY
                | st.lists(st.lists(st.floats() | st.integers(), min_size=8, max_size=8), min_size=8, max_size=8)},
    "watch": {"key": st.sampled_from(["network.layers.*.weights", "learning_rate", "*", "["]) | ANY},
}
BODIES = st.sampled_from(sorted(FIELDS)).flatmap(lambda path: st.tuples(st.just(path), st.one_of(
    st.fixed_dictionaries({}, optional={**FIELDS[path], "run": st.just("blobs") | ANY, "other": ANY}), ANY)))


#: One live run serves all the examples (function_scoped_fixture); a shared machine may be slow to generate them.
CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a valid but huge learning rate overflows the training
@settings(max_examples=300, deadline=None, suppress_health_check=CHECKS)
@given(request=BODIES)
def test_any_json_body_gets_a_2xx_or_a_4xx_with_a_json_error_never_a_500(live_once, request):
    path, body = request
    answer = live_once.client.post(f"/api/{path}", content=json.dumps(body),
                                   headers={"Content-Type": "application/json"})
    assert answer.status_code < 500, (path, body, answer.text)
    reply = answer.json()
    if answer.status_code >= 400:
        assert set(reply) == {"error"} and "\n" not in reply["error"], (path, body, reply)
    else:
        assert reply["ok"] is True, (path, body, reply)


@settings(max_examples=100, deadline=None, suppress_health_check=CHECKS)
@given(path=st.sampled_from(sorted(FIELDS)), content=st.binary(max_size=64))
def test_any_bytes_get_a_4xx_with_a_json_error(live_once, path, content):
    answer = live_once.client.post(f"/api/{path}", content=content)
    assert 400 <= answer.status_code < 500 or answer.json()["ok"] is True, (path, content, answer.text)
    if answer.status_code >= 400:
        assert set(answer.json()) == {"error"}


class Runs:
    """A live run for a fuzz test's examples, and a new one whenever the examples have ended it (a stop; a learning
    rate so large that the cost became NaN, which ends a run with its one line, as it should)."""

    def __init__(self, start):
        self.start, self.run = start, None

    @property
    def client(self):
        if self.run is None or self.run.loop.state.value == "stopped":
            self.close()
            self.run = self.start()
        return self.run.client

    def close(self):
        if self.run is not None:
            try:
                self.run.close()
            except SigmaError:  # the NaN the examples led it to, say
                pass


@pytest.fixture
def live_once(live, tmp_path):
    """Live runs for all of a fuzz test's examples, saving any Stop & save into ``tmp_path``."""
    runs = Runs(lambda: live(checkpoints=str(tmp_path)))
    yield runs
    runs.close()
