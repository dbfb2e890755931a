"""How a pass sends and decodes: one request on the wire while the previous answer is decoded, never two at
once, nothing sent after a failure; the garbage collector paused only while a pass decodes."""

from __future__ import annotations

import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from recommender.sources.errors import TemporarySourceError
from recommender.sources.transport import Fetched, Form, Transport
from recommender.sources.wire import Wire, gc_paused


class FakeTransport:
    """Records what was sent, whether two requests ever overlapped, and fails where it is told to."""

    def __init__(self, fail: str = "") -> None:
        self.sent: list[str] = []
        self.fail = fail
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()

    def fetch(self, endpoint: str, form: Form) -> Fetched:
        with self.lock:
            self.sent.append(endpoint)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.01)
            if endpoint == self.fail:
                raise TemporarySourceError("down", endpoint=endpoint, status=503)
            return Fetched(endpoint=endpoint, status=200, body=endpoint.encode(), seconds=0.01)
        finally:
            with self.lock:
                self.in_flight -= 1


def _wait_for(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


def _wire(fake: FakeTransport, pool: ThreadPoolExecutor, in_flight: int = 1) -> Wire:
    transport: Transport = fake  # type: ignore[assignment]
    return Wire(transport, pool, in_flight)


def test_the_next_request_is_on_the_wire_while_an_answer_is_decoded_and_only_one() -> None:
    fake = FakeTransport()
    with ThreadPoolExecutor(max_workers=1) as pool:
        answers = _wire(fake, pool).ahead([("a", []), ("b", []), ("c", [])])
        first = next(answers)
        assert first.body == b"a"
        _wait_for(lambda: fake.sent == ["a", "b"])  # sent while we still hold (decode) answer a
        time.sleep(0.1)
        assert fake.sent == ["a", "b"]  # one ahead, not the whole list
        assert [f.body for f in answers] == [b"b", b"c"]
    assert fake.sent == ["a", "b", "c"] and fake.most_in_flight == 1


def test_nothing_more_is_sent_after_a_failure() -> None:
    fake = FakeTransport(fail="b")
    with ThreadPoolExecutor(max_workers=1) as pool:
        answers = _wire(fake, pool).ahead([("a", []), ("b", []), ("c", []), ("d", [])])
        assert next(answers).body == b"a"
        with pytest.raises(TemporarySourceError):
            next(answers)
    assert fake.sent == ["a", "b"]


def test_a_request_sent_now_waits_for_the_one_in_flight() -> None:
    fake = FakeTransport()
    with ThreadPoolExecutor(max_workers=1) as pool:
        wire = _wire(fake, pool)
        answers = wire.ahead([("a", []), ("b", [])])
        next(answers)  # b is now on the wire
        assert wire.now("oom", []).body == b"oom"
        assert next(answers).body == b"b"
    assert fake.sent == ["a", "b", "oom"] and fake.most_in_flight == 1


def test_with_three_in_flight_three_run_at_once_and_answers_keep_their_order() -> None:
    fake = FakeTransport()
    names = [chr(ord("a") + i) for i in range(8)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = _wire(fake, pool, 3).ahead([(n, []) for n in names])
        first = next(answers)
        _wait_for(lambda: len(fake.sent) == 4)  # b, c on the wire and d sent once a was taken
        time.sleep(0.1)
        assert len(fake.sent) == 4 and first.body == b"a"
        assert [f.body for f in answers] == [n.encode() for n in names[1:]]
    assert sorted(fake.sent) == names and fake.most_in_flight == 3


def test_with_two_in_flight_a_failure_sends_at_most_one_more() -> None:
    fake = FakeTransport(fail="b")
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = _wire(fake, pool, 2).ahead([("a", []), ("b", []), ("c", []), ("d", []), ("e", [])])
        assert next(answers).body == b"a"
        with pytest.raises(TemporarySourceError):
            next(answers)
    assert fake.sent == ["a", "b", "c"]


def test_requests_in_flight_is_checked() -> None:
    from recommender.sources.config import PrometheusConfig

    assert PrometheusConfig(url="http://p:9090", requests_in_flight=4).requests_in_flight == 4
    for bad in (0, 17, 2.5):
        with pytest.raises(ValueError, match="requests_in_flight"):
            PrometheusConfig(url="http://p:9090", requests_in_flight=bad)  # type: ignore[arg-type]


def test_the_collector_is_paused_only_inside_a_pass_and_restored_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("a failed pass")
    assert gc.isenabled()
    gc.disable()  # an application that runs with the collector off keeps it off
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_requests_in_flight_sized_to_the_server() -> None:
    from recommender.sources.config import sized_in_flight

    assert [sized_in_flight({"GOMAXPROCS": n}) for n in (1, 2, 3, 4, 8, 64)] == [1, 1, 1, 2, 4, 4]
    for unknown in ({}, {"GOMAXPROCS": "8"}, {"GOMAXPROCS": True}, {"GOMAXPROCS": 0}, [], None):
        assert sized_in_flight(unknown) == 1


class StatusOnly:
    """Answers ``status/runtimeinfo`` with the given answers in turn (an exception is raised)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.asked = 0

    def post(self, endpoint: str, form: Form) -> object:
        assert endpoint == "status/runtimeinfo"
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_server_is_asked_once_and_again_only_after_a_temporary_failure() -> None:
    from prometheus_client import CollectorRegistry

    from recommender.sources.config import PrometheusConfig
    from recommender.sources.errors import PermanentSourceError
    from recommender.sources.prometheus import PrometheusSource

    def source(*answers: object) -> tuple[PrometheusSource, StatusOnly]:
        src = PrometheusSource(PrometheusConfig(url="http://p:9090", requests_in_flight=None),
                               registry=CollectorRegistry())
        fake = StatusOnly(*answers)
        src._transport = fake  # type: ignore[assignment]
        return src, fake

    src, fake = source(TemporarySourceError("down", endpoint="status/runtimeinfo"), {"GOMAXPROCS": 16})
    assert [src._in_flight() for _ in range(3)] == [1, 4, 4] and fake.asked == 2
    src, fake = source(PermanentSourceError("404", endpoint="status/runtimeinfo", status=404))
    assert [src._in_flight() for _ in range(3)] == [1, 1, 1] and fake.asked == 1  # no such page: 1 for good
    fixed = PrometheusSource(PrometheusConfig(url="http://p:9090", requests_in_flight=3), registry=CollectorRegistry())
    assert fixed._in_flight() == 3  # a number given is never second-guessed (and nothing is asked)
