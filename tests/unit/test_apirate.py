"""The API client's pacing: token bucket arithmetic, APF Retry-After pauses, and PDB 429s left alone."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from podtailor.kube.pacing import AdaptiveRate, RateConfig, install, retry_after_seconds
from podtailor.runtime.cli import add_kube_flags


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_burst_then_the_rate() -> None:
    clock = Clock()
    r = AdaptiveRate(RateConfig(qps=10, burst=3), clock)
    # Three tokens: three requests go at once; the 4th owes one token = 1/10 s, the 5th 2/10 s.
    assert [r.acquire() for _ in range(5)] == [0.0, 0.0, 0.0, pytest.approx(0.1), pytest.approx(0.2)]
    clock.t += 1.0  # 1 s refills 10 tokens on a debt of 2, capped at the burst of 3
    assert [r.acquire() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]


def test_apf_429_pauses_everyone_and_halves_the_rate_then_recovers() -> None:
    clock = Clock()
    r = AdaptiveRate(RateConfig(qps=20, burst=5, recover_after_s=10), clock)
    r.observe(429, 4.0, budget_refusal=False)
    assert r.rate == 10.0 and r.throttled == 1
    assert r.acquire() == pytest.approx(4.0)  # the Retry-After, even with tokens in the bucket
    clock.t += 2.0
    assert r.acquire() == pytest.approx(2.0)
    r.observe(429, None, budget_refusal=False)  # no header: 1 s from now (t=1002 -> 1003), still inside 1004
    assert r.rate == 5.0 and r.acquire() == pytest.approx(2.0)
    clock.t += 25.0  # two quiet periods of 10 s since the last cut: +2 x 2 = 9 qps
    r.acquire()
    assert r.rate == pytest.approx(9.0)
    clock.t += 100.0
    r.acquire()
    assert r.rate == 20.0  # never above the configured rate


def test_budget_refusals_and_other_statuses_change_nothing() -> None:
    clock = Clock()
    r = AdaptiveRate(RateConfig(qps=20, burst=5), clock)
    r.observe(429, 10.0, budget_refusal=True)
    r.observe(500, 10.0, budget_refusal=False)
    r.observe(200, None, budget_refusal=False)
    assert r.rate == 20.0 and r.throttled == 0 and r.acquire() == 0.0


def test_the_rate_never_goes_below_the_floor() -> None:
    r = AdaptiveRate(RateConfig(qps=8, burst=1, min_qps=1), Clock())
    for _ in range(10):
        r.observe(429, 1.0, budget_refusal=False)
    assert r.rate == 1.0  # 8 -> 4 -> 2 -> 1 -> 1 ...


def test_unpaced_still_honours_retry_after() -> None:
    clock = Clock()
    r = AdaptiveRate(RateConfig(qps=0, burst=1), clock)
    assert [r.acquire() for _ in range(100)] == [0.0] * 100
    r.observe(429, 3.0, budget_refusal=False)
    assert r.acquire() == pytest.approx(3.0)


@given(st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=1, max_size=60),
       st.floats(min_value=0.5, max_value=100.0), st.integers(min_value=1, max_value=50))
def test_sending_when_told_never_exceeds_burst_plus_rate_times_time(gaps: list[float], qps: float,
                                                                    burst: int) -> None:
    clock = Clock()
    r = AdaptiveRate(RateConfig(qps=qps, burst=burst), clock)
    start, sent = clock.t, []
    for gap in gaps:
        clock.t += gap
        sent.append(clock.t + r.acquire())
    # Every window from the start holds at most burst + qps x its length requests (the bucket's promise).
    for i, t in enumerate(sorted(sent)):
        assert i + 1 <= burst + qps * (t - start) + 1e-6


@pytest.mark.parametrize(("header", "seconds"), [("3", 3.0), (" 10 ", 10.0), ("0", 0.0), (None, None),
                                                  ("soon", None), ("-1", None), ("1e9", None), ("nan", None)])
def test_retry_after_header(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds


class FakeResponse:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body, self.reads = status, headers, body, 0

    def getheader(self, name: str) -> str | None:
        return self.headers.get(name)

    def read(self) -> bytes:
        self.reads += 1
        return self.body


def test_install_paces_and_reads_the_429_kind() -> None:
    api = client.ApiClient(client.Configuration())
    responses = [FakeResponse(200, {}, b"{}"),
                 FakeResponse(429, {"Retry-After": "10"}, b'{"details":{"causes":[{"reason":"DisruptionBudget"}]}}'),
                 FakeResponse(429, {"Retry-After": "2"}, b"Too many requests, please try again later.\n")]
    calls: list[str] = []

    def inner(method: str, url: str, *args: Any, **kwargs: Any) -> FakeResponse:
        calls.append(url)
        return responses[len(calls) - 1]

    api.rest_client.request = inner
    clock, slept = Clock(), []
    limiter = AdaptiveRate(RateConfig(qps=10, burst=10), clock)
    install(api, limiter, sleep=slept.append)
    for i in range(3):
        assert api.rest_client.request("GET", f"u{i}") is responses[i]  # the caller gets the response unchanged
    assert limiter.throttled == 1 and limiter.rate == 5.0  # only the APF one counted
    api.rest_client.request = lambda *a, **k: FakeResponse(200, {}, b"")  # type: ignore[assignment]

    def sleep(seconds: float) -> None:  # time passes while a request waits
        slept.append(seconds)
        clock.t += seconds

    install(api, limiter, sleep=sleep)
    api.rest_client.request("GET", "u3")
    assert slept == [pytest.approx(2.0)]  # the next request waited out the APF Retry-After


def test_a_429_that_comes_while_a_request_waits_for_its_slot_pauses_it_too() -> None:
    # The request reserves its slot (1 s of token debt); while it sleeps, another thread's request gets an APF
    # 429 with Retry-After 2 s. Sending at the end of its own wait would land inside that pause: it waits on.
    api = client.ApiClient(client.Configuration())
    api.rest_client.request = lambda *a, **k: FakeResponse(200, {}, b"")
    clock = Clock()
    limiter = AdaptiveRate(RateConfig(qps=1, burst=1), clock)
    limiter.acquire()  # the burst is spent: the next slot is 1 s away
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 1:
            limiter.observe(429, 2.0, budget_refusal=False)  # another thread's 429, 0 s into our wait
        clock.t += seconds

    install(api, limiter, sleep=sleep)
    api.rest_client.request("GET", "u")
    assert slept == [pytest.approx(1.0), pytest.approx(1.0)]  # its slot, then the rest of the pause
    assert clock.t == pytest.approx(1002.0)


def test_flags_validate_before_anything_is_contacted() -> None:
    p = argparse.ArgumentParser()
    add_kube_flags(p)
    args = p.parse_args([])
    assert (args.kube_api_qps, args.kube_api_burst) == (50.0, 100)
    for bad in (["--kube-api-qps", "-1"], ["--kube-api-qps", "nan"], ["--kube-api-burst", "0"],
                ["--kube-api-burst", "x"]):
        with pytest.raises(SystemExit):
            p.parse_args(bad)
