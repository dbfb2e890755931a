"""HTTP to the Prometheus API: form-encoded POST, auth, TLS, retries, error classification and metrics.

Owns every request the source sends. It is built on prometheus-api-client's ``PrometheusConnect``: the
connect object holds the ``requests`` session (TLS verification, client certificate), the base URL, the
static headers and the basic auth. Queries, though, are sent by this module through that same session,
because prometheus-api-client 0.7.2 cannot do what we need: its ``method="POST"`` still puts the query in
the URL query string (``params=``), so long selectors still hit 414/422 as KRR saw (#60, #66); it rounds
range bounds to whole seconds, drops the ``warnings`` of partial responses, and reports every failure as
one exception type with the status only in its text. We POST ``application/x-www-form-urlencoded``
bodies to ``<url>/api/v1/{query,query_range,series}`` with the connect object's headers, auth, verify and
cert, plus the bearer token read from its file on each request. The connect object's own urllib3 retries
are switched off so that retrying happens once, here: temporary failures (connection errors, timeouts,
408, 429, 5xx, and Thanos' 422 for a failed store) are retried with exponential backoff; anything else raises
``PermanentSourceError`` at once.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_client import CollectorRegistry, Counter, Histogram
from urllib3.util.retry import Retry

from podtailor.promquery import TEMPORARY_STATUS, error_text
from recommender.sources import remote_read
from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import PermanentSourceError, QueryTooLargeError, SourceError, TemporarySourceError
from recommender.sources.matrix import decode_series

log = logging.getLogger(__name__)
Form = Sequence[tuple[str, str]]
_RESULT_ARRAY = re.compile(r'"result"\s*:\s*\[')
_SUCCESS = re.compile(r'"status"\s*:\s*"success"')
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_STORE_FAILURE = re.compile(r"^execution: .*rpc error: code = (Unavailable|Aborted|Internal|DeadlineExceeded|"
                            r"ResourceExhausted)")
"""Thanos Query's answer (422, errorType ``execution``) when a store it asked failed and partial responses are
off: the store's gRPC status is in the text. The store is down or overloaded, not the query wrong: temporary."""
_NEVER = re.compile(r"(?!)")
_TOO_LARGE = {422: re.compile(r"^execution: .*too many samples"), 503: re.compile(r"^timeout: "),
              400: re.compile(r"exceeded sample limit")}
"""Answers that say the query is too big to run as it is (web/api/v1/api.go, ``respondError``: errorExec is 422,
errorTimeout 503; the limit's message is promql's ``ErrTooManySamples``; a remote read over
``--storage.remote.read-sample-limit`` is a 400 "exceeded sample limit", storage/remote/codec.go
``ToQueryResult``): not retried, split by the source."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    """A 2xx answer's undecoded body and the seconds its HTTP attempt took."""

    endpoint: str
    status: int
    body: bytes
    seconds: float


class SourceMetrics:
    """The source's metrics, registered on an injected registry (bounded labels: no namespaces, no pods)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("podtailor_source_requests", "HTTP requests to the metrics backend.",
                                ["endpoint", "outcome"], registry=registry)
        self.seconds = Histogram("podtailor_source_request_seconds", "Duration of HTTP requests to the backend.",
                                 ["endpoint"], registry=registry)
        self.dropped = Counter("podtailor_source_samples_dropped", "Samples dropped before building batches.",
                               ["reason"], registry=registry)
        self.missing = Counter("podtailor_source_missing_series",
                               "Containers listed by the series index without any usage sample in a pass (a data "
                               "gap; may include containers that stopped just before the range).",
                               registry=registry)
        self.warnings = Counter("podtailor_source_warnings", "Responses that carried warnings (partial data).",
                                ["endpoint"], registry=registry)


def _retry_after_s(response: requests.Response | None) -> float:
    value = response.headers.get("Retry-After", "") if response is not None else ""
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0


class Transport:
    """Sends API requests; ``request_count`` counts HTTP attempts (retries included) for benchmarks."""

    def __init__(self, config: PrometheusConfig, metrics: SourceMetrics, *,
                 session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._metrics = metrics
        self._sleep = sleep
        self.request_count = 0
        self._count_lock = threading.Lock()  # fetch runs on several threads when requests_in_flight > 1
        session = session if session is not None else requests.Session()
        if config.insecure_skip_verify:
            session.verify = False
        elif config.ca_file is not None:
            session.verify = str(config.ca_file)
        if config.client_cert_file is not None and config.client_key_file is not None:
            session.cert = (str(config.client_cert_file), str(config.client_key_file))
        auth = None
        if config.basic_auth_username is not None and config.basic_auth_password is not None:
            auth = (config.basic_auth_username, config.basic_auth_password)
        self._session = session
        self.client = PrometheusConnect(url=config.base_url, headers=dict(config.extra_headers), auth=auth,
                                        session=session, retry=Retry(total=0), timeout=config.timeout_s,
                                        method="POST")

    def close(self) -> None:
        self.client.close()

    def _headers(self) -> dict[str, str]:
        headers = dict(self.client.headers or {})
        if self._config.auth_headers is not None:  # the API server's own credentials, through its service proxy
            headers.update(self._config.auth_headers())
        if self._config.bearer_token_file is not None:
            try:
                token = self._config.bearer_token_file.read_text(encoding="utf-8").strip()
            except OSError as err:
                raise PermanentSourceError("cannot read the bearer token file") from err
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _attempt(self, endpoint: str, form: Form | bytes) -> tuple[int, bytes]:
        read_only = endpoint.startswith("status/")  # Prometheus serves its status pages to GET only
        headers = self._headers()
        params: list[tuple[str, str]] | None = None
        data: bytes | list[tuple[str, str]] | None
        if isinstance(form, bytes):  # a remote-read request: a snappy-compressed protobuf body
            headers.update(remote_read.HEADERS)
            data = form
        elif read_only:
            params, data = list(form), None
        else:
            data = list(form)
        response = self._session.request(
            "GET" if read_only else "POST", f"{self.client.url}/api/v1/{endpoint}", params=params, data=data,
            headers=headers, auth=self.client.auth, verify=self._session.verify, cert=self._session.cert,
            timeout=self._config.timeout_s)
        try:
            response.raise_for_status()
        except requests.HTTPError as err:
            status, text = response.status_code, error_text(response)
            temporary = status in TEMPORARY_STATUS or (status == 422 and _STORE_FAILURE.search(text) is not None)
            kind = TemporarySourceError if temporary else PermanentSourceError
            if _TOO_LARGE.get(status, _NEVER).search(text) is not None:
                kind = QueryTooLargeError
            raise kind(f"prometheus answered {status}: {text}", endpoint=endpoint, status=status) from err
        return response.status_code, response.content

    def _classified(self, endpoint: str, form: Form | bytes) -> tuple[int, bytes]:
        try:
            return self._attempt(endpoint, form)
        except SourceError:
            raise
        except requests.exceptions.SSLError as err:
            raise PermanentSourceError("TLS failure talking to prometheus", endpoint=endpoint) from err
        except (requests.ConnectionError, requests.Timeout) as err:
            raise TemporarySourceError(f"cannot reach prometheus: {type(err).__name__}", endpoint=endpoint) from err
        except requests.RequestException as err:
            raise PermanentSourceError(f"request failed: {type(err).__name__}", endpoint=endpoint) from err

    def post(self, endpoint: str, form: Form) -> Any:
        """``data`` of a successful response; retries temporary failures, then raises."""
        return self.decode(self.fetch(endpoint, form))

    def fetch(self, endpoint: str, form: Form | bytes) -> Fetched:
        """The body of a 2xx answer, not yet decoded; retries temporary failures, then raises. Split from
        ``decode`` so that a caller can decode one body while the next request is on the wire. ``form`` is a
        form for the query endpoints, or the compressed body of a remote-read request (endpoint ``read``)."""
        attempt = 0
        while True:
            with self._count_lock:
                self.request_count += 1
            started = time.monotonic()
            try:
                status, body = self._classified(endpoint, form)
            except TemporarySourceError as err:
                self._observe(endpoint, "temporary_error", started)
                if attempt >= self._config.retries:
                    raise
                delay = min(self._config.backoff_max_s,
                            max(self._config.backoff_base_s * 2**attempt, _retry_after_s(_response_of(err))))
                log.warning("prometheus request failed, retrying",
                            extra={"endpoint": endpoint, "attempt": attempt + 1, "delay_s": delay,
                                   "status": err.status, "error": str(err)})
                attempt += 1
                self._sleep(delay)
                continue
            except PermanentSourceError:
                self._observe(endpoint, "permanent_error", started)
                raise
            return Fetched(endpoint=endpoint, status=status, body=body, seconds=time.monotonic() - started)

    def decode(self, fetched: Fetched) -> Any:
        """``data`` of a fetched Prometheus API success (its warnings logged and counted); the request's
        outcome is recorded here, so a body that is not an API success counts as a permanent error."""
        try:
            body = json.loads(fetched.body)
        except ValueError as err:
            raise self._not_json(fetched, err) from err
        return self._envelope(fetched, body)

    def decode_result(self, fetched: Fetched, result_type: str) -> Iterator[Any]:
        """The items of ``data.result``, decoded one at a time, so a big range answer never exists as one
        decoded whole: each item can become arrays and be freed before the next is decoded (the decoded
        JSON takes about 6 times the body's size). A matrix item of the plain shape comes as a
        ``DecodedSeries``, its samples parsed straight into arrays (``matrix.decode_series``); others as JSON.
        The envelope (status, resultType, warnings) is checked
        around the result array: before the first item when it comes first, as Prometheus writes it, and in
        any case once the array has been read (an error then is raised after the items). Bodies of another
        shape are decoded whole, the same checks applying."""
        try:
            text = fetched.body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise self._not_json(fetched, err) from err
        opening = _RESULT_ARRAY.search(text)
        if opening is None or not _SUCCESS.search(text, 0, opening.start()):
            yield from self._whole_result(fetched, self.decode(fetched), result_type)
            return
        i = opening.end()
        try:
            while True:
                i = _SPACE.match(text, i).end()  # type: ignore[union-attr]  # [ \t\n\r]* always matches
                if text.startswith("]", i):
                    break
                fast = decode_series(text, i) if result_type == "matrix" else None
                item, i = fast if fast is not None else _DECODER.raw_decode(text, i)
                yield item
                i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
                if text.startswith(",", i):
                    i += 1
                elif not text.startswith("]", i):
                    raise ValueError(f"expected , or ] at {i}")
            body = json.loads(text[:opening.start()] + '"result":[]' + text[i + 1:])
        except ValueError as err:
            raise self._not_json(fetched, err) from err
        list(self._whole_result(fetched, self._envelope(fetched, body), result_type))

    def decode_read(self, fetched: Fetched) -> list[list[remote_read.RawSeries]]:
        """The series of each query of a remote-read answer; a body that is not one is a permanent error."""
        try:
            out = remote_read.decode_response(fetched.body)
        except (ValueError, UnicodeDecodeError) as err:
            self._record(fetched.endpoint, "permanent_error", fetched.seconds)
            raise PermanentSourceError(f"malformed remote-read answer: {str(err)[:200]}", endpoint=fetched.endpoint,
                                       status=fetched.status) from err
        self._record(fetched.endpoint, "ok", fetched.seconds)
        return out

    @staticmethod
    def _whole_result(fetched: Fetched, data: Any, result_type: str) -> Iterator[Any]:
        if not isinstance(data, dict) or data.get("resultType") != result_type:
            raise PermanentSourceError(f"expected a {result_type} result", endpoint=fetched.endpoint)
        result = data.get("result")
        if not isinstance(result, list):
            raise PermanentSourceError("result is not a list", endpoint=fetched.endpoint)
        yield from result

    def _not_json(self, fetched: Fetched, err: Exception) -> PermanentSourceError:
        self._record(fetched.endpoint, "permanent_error", fetched.seconds)
        return PermanentSourceError("response is not JSON: is the URL (and path prefix) right?",
                                    endpoint=fetched.endpoint, status=fetched.status)

    def _envelope(self, fetched: Fetched, body: Any) -> Any:
        endpoint = fetched.endpoint
        if not isinstance(body, dict) or body.get("status") != "success" or "data" not in body:
            self._record(endpoint, "permanent_error", fetched.seconds)
            raise PermanentSourceError("response is not a Prometheus API success", endpoint=endpoint)
        warnings = body.get("warnings") or []
        if warnings:
            self._metrics.warnings.labels(endpoint).inc()
            log.warning("prometheus returned warnings, data may be partial",
                        extra={"endpoint": endpoint, "warnings": [str(w)[:200] for w in warnings[:5]]})
        self._record(endpoint, "ok", fetched.seconds)
        return body["data"]

    def _observe(self, endpoint: str, outcome: str, started: float) -> None:
        self._record(endpoint, outcome, time.monotonic() - started)

    def _record(self, endpoint: str, outcome: str, seconds: float) -> None:
        self._metrics.requests.labels(endpoint, outcome).inc()
        self._metrics.seconds.labels(endpoint).observe(seconds)


def _response_of(err: SourceError) -> requests.Response | None:
    cause = err.__cause__
    return cause.response if isinstance(cause, requests.HTTPError) else None
