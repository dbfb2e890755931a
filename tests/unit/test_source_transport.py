"""Unit tests for recommender.sources.transport against a scripted HTTP server on 127.0.0.1.

A real socket instead of a patched ``requests``: the tests see the bytes on the wire (POST body, headers,
path prefix) and the real exceptions of a refused connection.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from prometheus_client import CollectorRegistry

from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import PermanentSourceError, QueryTooLargeError, TemporarySourceError
from recommender.sources.matrix import DecodedSeries
from recommender.sources.transport import Fetched, SourceMetrics, Transport

Reply = tuple[int, object, dict[str, str]]
OK: Reply = (200, {"status": "success", "data": {"resultType": "vector", "result": []}}, {})


@dataclass
class Script:
    responses: list[Reply] = field(default_factory=list)
    seen: list[dict[str, object]] = field(default_factory=list)


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode()
            script.seen.append({"path": urlsplit(self.path).path, "query": urlsplit(self.path).query,
                                "form": parse_qs(body), "headers": dict(self.headers)})
            status, payload, headers = script.responses.pop(0) if script.responses else OK
            raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def _transport(url: str, **options: object) -> tuple[Transport, CollectorRegistry, list[float]]:
    registry = CollectorRegistry()
    sleeps: list[float] = []
    config = PrometheusConfig(url=url, **{"retries": 2, "backoff_base_s": 0.5, **options})  # type: ignore[arg-type]
    return Transport(config, SourceMetrics(registry), sleep=sleeps.append), registry, sleeps


def _count(registry: CollectorRegistry, endpoint: str, outcome: str) -> float | None:
    return registry.get_sample_value("podtailor_source_requests_total", {"endpoint": endpoint, "outcome": outcome})


def test_posts_a_form_body_with_prefix_headers_and_a_fresh_token(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    token = tmp_path / "token"
    token.write_text("first\n")
    transport, _, _ = _transport(url + "/prometheus/", bearer_token_file=token, extra_headers={"X-Scope-OrgID": "t1"})
    long_query = "up{" + ",".join(f'l{i}="{"x" * 50}"' for i in range(300)) + "}"  # ~20 kB: would be a 414 in a URL
    transport.post("query", [("query", long_query), ("time", "1.5")])
    token.write_text("second\n")  # rotation: the next request reads the file again
    transport.post("query", [("query", "up"), ("time", "2")])
    first, second = script.seen
    assert first["path"] == "/prometheus/api/v1/query" and first["query"] == ""
    assert first["form"] == {"query": [long_query], "time": ["1.5"]}
    headers = first["headers"]
    assert isinstance(headers, dict) and headers["Authorization"] == "Bearer first"
    assert headers["X-Scope-OrgID"] == "t1"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    second_headers = second["headers"]
    assert isinstance(second_headers, dict) and second_headers["Authorization"] == "Bearer second"
    assert transport.request_count == 2


def test_temporary_failures_are_retried_with_exponential_backoff(server: tuple[str, Script]) -> None:
    url, script = server
    script.responses = [(503, {"status": "error", "errorType": "unavailable", "error": "busy"}, {}),
                        (502, "bad gateway", {}), OK]
    transport, registry, sleeps = _transport(url)
    assert transport.post("query", [("query", "up")]) == {"resultType": "vector", "result": []}
    assert sleeps == [0.5, 1.0]  # 0.5 * 2**0, 0.5 * 2**1
    assert _count(registry, "query", "temporary_error") == 2 and _count(registry, "query", "ok") == 1
    assert transport.request_count == 3


def test_retries_spent_raise_temporary_and_honour_retry_after(server: tuple[str, Script]) -> None:
    url, script = server
    script.responses = [(429, "slow down", {"Retry-After": "4"})] * 3
    transport, _, sleeps = _transport(url, backoff_max_s=3.0)
    with pytest.raises(TemporarySourceError) as caught:
        transport.post("query_range", [("query", "up")])
    assert caught.value.status == 429 and isinstance(caught.value.__cause__, requests.HTTPError)
    assert sleeps == [3.0, 3.0]  # Retry-After 4 s, capped at backoff_max_s


def test_client_errors_are_permanent_and_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.responses = [(400, {"status": "error", "errorType": "bad_data", "error": "parse error"}, {})]
    transport, registry, sleeps = _transport(url)
    with pytest.raises(PermanentSourceError, match="bad_data: parse error") as caught:
        transport.post("query", [("query", "up{")])
    assert caught.value.status == 400 and sleeps == []
    assert _count(registry, "query", "permanent_error") == 1


def test_a_thanos_store_failure_is_temporary_but_other_execution_errors_are_not(server: tuple[str, Script]) -> None:
    url, script = server
    # Thanos Query v0.42's answer, as seen in tests/integration/test_backends_real.py, with partial_response=false.
    store_down = {"status": "error", "errorType": "execution", "error": "proxy Series(): rpc error: code = Aborted "
                  "desc = receive series from Addr: 127.0.0.1:1: rpc error: code = Internal desc = perform GET"}
    script.responses = [(422, store_down, {}), (422, store_down, {}), OK]
    transport, registry, sleeps = _transport(url)
    assert transport.post("query", [("query", "up")]) == OK[1]["data"]  # type: ignore[index]
    assert len(sleeps) == 2 and _count(registry, "query", "temporary_error") == 2
    too_many = {"status": "error", "errorType": "execution", "error": "query processing would load too many samples"}
    script.responses = [(422, too_many, {})]
    with pytest.raises(PermanentSourceError, match="too many samples") as caught:
        transport.post("query", [("query", "up")])
    assert caught.value.status == 422 and len(sleeps) == 2


def test_too_big_answers_are_told_apart_and_not_retried(server: tuple[str, Script]) -> None:
    """Prometheus's --query.max-samples (422 execution) and --query.timeout (503 timeout) answers are
    QueryTooLargeError at once (the source splits the query); a 503 for anything else stays temporary."""
    url, script = server
    transport, _, sleeps = _transport(url)
    too_many = {"status": "error", "errorType": "execution",
                "error": "query processing would load too many samples into memory in query execution"}
    timed_out = {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}
    for status, body in ((422, too_many), (503, timed_out)):
        script.responses = [(status, body, {})]
        with pytest.raises(QueryTooLargeError) as caught:
            transport.post("query_range", [("query", "up")])
        assert caught.value.status == status and caught.value.endpoint == "query_range" and sleeps == []
    unavailable = {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}
    script.responses = [(503, unavailable, {}), OK]
    assert transport.post("query", [("query", "up")]) == OK[1]["data"]  # type: ignore[index]
    assert len(sleeps) == 1


def test_non_prometheus_answers_are_permanent(server: tuple[str, Script]) -> None:
    url, script = server
    script.responses = [(200, "<html>login</html>", {})]
    transport, registry, _ = _transport(url)
    with pytest.raises(PermanentSourceError, match="not JSON") as caught:
        transport.post("query", [("query", "up")])
    assert caught.value.status == 200
    # Decoded after the HTTP round trip, but counted once, as what it is: a permanent error, not a success.
    assert _count(registry, "query", "permanent_error") == 1 and _count(registry, "query", "ok") is None


def test_warnings_are_surfaced_in_a_metric(server: tuple[str, Script], caplog: pytest.LogCaptureFixture) -> None:
    url, script = server
    script.responses = [(200, {"status": "success", "warnings": ["store eu-2 unreachable"],
                               "data": {"resultType": "vector", "result": []}}, {})]
    transport, registry, _ = _transport(url)
    assert transport.post("query", [("query", "up")]) == {"resultType": "vector", "result": []}
    assert registry.get_sample_value("podtailor_source_warnings_total", {"endpoint": "query"}) == 1
    assert any(r.getMessage() == "prometheus returned warnings, data may be partial" for r in caplog.records)


def test_connection_refused_is_temporary() -> None:
    with socket.socket() as s:  # a port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport, registry, sleeps = _transport(f"http://127.0.0.1:{port}")
    with pytest.raises(TemporarySourceError) as caught:
        transport.post("query", [("query", "up")])
    assert isinstance(caught.value.__cause__, requests.ConnectionError)
    assert len(sleeps) == 2 and _count(registry, "query", "temporary_error") == 3


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        PrometheusConfig(url="http://x", bearer_token_file=Path("t"), basic_auth_username="u", basic_auth_password="p")
    with pytest.raises(ValueError):
        PrometheusConfig(url="http://x", cluster_label="bad-label", cluster_value="v")
    with pytest.raises(ValueError):
        PrometheusConfig(url="http://x", max_points_per_series=11_001)
    assert "secret" not in repr(PrometheusConfig(url="http://x", basic_auth_username="u", basic_auth_password="secret"))
    # The CPU rate window: at least 4 scrapes and at least one step.
    assert PrometheusConfig(url="http://x", step_s=60, scrape_interval_s=30).cpu_rate_window_s == 120
    assert PrometheusConfig(url="http://x", step_s=300, scrape_interval_s=15).cpu_rate_window_s == 300


# ------------------------------------------------------------------------ decoding a result item by item
MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"pod": "a", "note": '"result":[ ] , {"metric":'}, "values": [[1.0, "0.5"], [2.0, "NaN"]]},
    {"metric": {"pod": "b\u00e9"}, "values": [[1.0, "1e3"]]}]}}


def _plain(item: object) -> tuple[object, str]:
    """An item as (labels, repr of its float pairs), whether decoded as JSON or straight into arrays."""
    if isinstance(item, DecodedSeries):
        times = item.timestamps()
        assert times is not None
        return item.metric, repr(list(zip(times.tolist(), item.values.tolist(), strict=True)))
    assert isinstance(item, dict)
    return item["metric"], repr([(float(t), float(v)) for t, v in item["values"]])


def _fetched(payload: object) -> Fetched:
    raw = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
    return Fetched(endpoint="query_range", status=200, body=raw, seconds=0.1)


@pytest.mark.parametrize("text", [
    json.dumps(MATRIX),  # Prometheus's order: status first, the result array last
    json.dumps(MATRIX, indent=2),  # whitespace everywhere
    json.dumps({"data": MATRIX["data"], "status": "success"}),  # status after data: decoded whole
    json.dumps({**MATRIX, "warnings": ["partial"], "infos": ["x"]}),  # an envelope after the array
])
def test_items_are_the_same_as_a_whole_decode(text: str) -> None:
    transport, registry, _ = _transport("http://127.0.0.1:1")
    lazy = transport.decode_result(_fetched(text), "matrix")
    expected = [_plain(item) for item in MATRIX["data"]["result"]]
    assert _plain(next(lazy)) == expected[0]  # an item is handed over before the next is decoded
    assert [_plain(item) for item in lazy] == expected[1:]
    assert _count(registry, "query_range", "ok") == 1
    warned = registry.get_sample_value("podtailor_source_warnings_total", {"endpoint": "query_range"})
    assert warned == (1 if "warnings" in text else None)


@pytest.mark.parametrize(("text", "message"), [
    ('{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}},{"metric":', "not JSON"),
    ('{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}} {"metric":{}}]}}', "not JSON"),
    ('{"status":"success","data":{"resultType":"matrix","result":[]}} trailing', "not JSON"),
    ('{"status":"error","data":{"resultType":"matrix","result":[]}}', "not a Prometheus API success"),
    ('{"status":"success","data":{"resultType":"vector","result":[]}}', "expected a matrix result"),
    (b'{"status":"success","data":{"result":["\xff"]}}', "not JSON"),
    ("<html>login</html>", "not JSON"),
])
def test_a_broken_body_is_a_permanent_error(text: str | bytes, message: str) -> None:
    transport, registry, _ = _transport("http://127.0.0.1:1")
    body = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(PermanentSourceError, match=message):
        list(transport.decode_result(Fetched(endpoint="query_range", status=200, body=body, seconds=0.1),
                                     "matrix"))
    # Counted as a permanent error when the body is not an API success; an answer of the wrong type is an
    # API success (counted ok) that this query cannot use, as with a whole decode.
    wrong_type = message.startswith("expected")
    assert _count(registry, "query_range", "ok") == (1 if wrong_type else None)
    assert _count(registry, "query_range", "permanent_error") == (None if wrong_type else 1)
