"""The updater's watch-fed cache (``updater/kube/informer.py``) and its use by the reader and the journal,
on scripted API answers: events applied in order, versions that never go back, 410 Gone and broken streams
followed by a relist (with listing in between), silence, deletion, and kinds that are not served."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.listing import Listing
from updater.kube.informer import SILENCE_MARGIN_S, Informer, older
from updater.kube.snapshot import LIST_OPTIONS, ClusterReader


def pod(name: str, rv: int, ns: str = "shop", cpu: str = "500m") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv), "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}}


class Answer:
    """An HTTP answer as the client's REST layer returns it with ``_preload_content=False``."""

    def __init__(self, body: bytes = b"", lines: list[dict[str, Any]] | None = None) -> None:
        self.data, self.status = body, 200
        self.lines = lines or []

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for line in self.lines:
            yield json.dumps(line).encode() + b"\n"

    def close(self) -> None: ...

    def release_conn(self) -> None: ...


class Server:
    """Scripted answers: ``lists`` for the successive lists, ``watches`` for the successive watches (an
    exception is raised, a list of events is streamed; when they run out, an empty stream). Records calls."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[dict[str, Any]] = []
        self.list_gate = threading.Event()
        self.list_gate.set()

    def call(self, *ns: str, **kw: Any) -> Answer:
        self.calls.append({"namespace": ns[0] if ns else None, **kw})
        if kw.get("watch"):
            answer = self.watches.pop(0) if self.watches else []
            if isinstance(answer, Exception):
                raise answer
            time.sleep(0.01)
            return Answer(lines=answer)
        self.list_gate.wait(10)
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        items, rv = answer
        return Answer(json.dumps({"metadata": {"resourceVersion": rv}, "items": items}).encode())

    def listing(self, optional: bool = False) -> Listing:
        return Listing(group="", resource="pods", call=self.call, optional=optional)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def names(informer: Informer) -> dict[str, str]:
    items = informer.items()
    assert items is not None
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}


def test_events_are_applied_in_order_and_a_deletion_removes_the_pod() -> None:
    server = Server(lists=[([pod("a", 10), pod("b", 11)], "12")], watches=[])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    assert names(informer) == {"a": "10", "b": "11"} and informer.resource_version == "12"
    informer.apply(event("ADDED", pod("c", 13)))
    informer.apply(event("MODIFIED", pod("a", 14, cpu="250m")))
    informer.apply(event("DELETED", pod("b", 15)))
    informer.apply(event("BOOKMARK", {"metadata": {"resourceVersion": "20"}}))
    assert names(informer) == {"a": "14", "c": "13"}
    items = informer.items()
    assert items is not None
    [a] = [o for o in items if o["metadata"]["name"] == "a"]
    assert a["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    assert informer.resource_version == "20"  # the next watch continues after the bookmark


def test_managed_fields_are_not_kept() -> None:
    with_fields = pod("a", 10)
    with_fields["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    server = Server(lists=[([with_fields], "10")], watches=[])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    informer.apply(event("ADDED", {**pod("b", 11), "metadata": {**pod("b", 11)["metadata"], "managedFields": []}}))
    items = informer.items()
    assert items is not None and [sorted(o["metadata"]) for o in items] == [
        ["name", "namespace", "resourceVersion", "uid"]] * 2
    assert "managedFields" in with_fields["metadata"]  # the caller's object is left alone


def test_an_older_version_never_replaces_a_newer_one() -> None:
    server = Server(lists=[([pod("a", 10)], "10")], watches=[])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    informer.observe(pod("a", 30, cpu="250m"))  # our write's answer, before its event
    informer.apply(event("MODIFIED", pod("a", 25)))  # an earlier change, arriving after
    informer.apply(event("DELETED", pod("a", 26)))  # deleted, then created again by us at 30
    assert names(informer) == {"a": "30"}
    informer.apply(event("MODIFIED", pod("a", 31)))
    assert names(informer) == {"a": "31"}
    assert older("9", "10") and not older("10", "9") and not older("x", "10")


def test_silence_longer_than_a_watch_makes_the_cache_untrusted() -> None:
    clock = Clock()
    server = Server(lists=[([pod("a", 10)], "10")], watches=[])
    informer = Informer(server.listing(), "shop", watch_timeout_s=15, clock=clock)
    assert informer.items() is None  # not listed yet
    informer.relist()
    clock.now += 15 + SILENCE_MARGIN_S - 0.1
    assert names(informer) == {"a": "10"}
    clock.now += 0.2  # 15 s watch + 5 s margin without a byte: the connection may be dead
    assert informer.items() is None
    informer.apply(event("BOOKMARK", {"metadata": {"resourceVersion": "11"}}))
    assert names(informer) == {"a": "10"}


def test_the_watch_starts_at_the_listed_version_with_the_same_selector() -> None:
    server = Server(lists=[([pod("a", 10)], "17")], watches=[[event("MODIFIED", pod("a", 18))]])
    informer = Informer(server.listing(), "shop", watch_timeout_s=3, list_options=LIST_OPTIONS["Pod"])
    informer.relist()
    informer.watch_once()
    assert names(informer) == {"a": "18"}
    listed, watched = server.calls
    assert listed["field_selector"] == watched["field_selector"] == LIST_OPTIONS["Pod"]["field_selector"]
    assert watched["watch"] is True and watched["resource_version"] == "17" and watched["timeout_seconds"] == 3
    assert watched["allow_watch_bookmarks"] is True and watched["namespace"] == "shop"
    assert watched["_request_timeout"][1] == 3 + SILENCE_MARGIN_S  # a dead stream ends on the client side too


def test_410_gone_raises_from_the_stream() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                         "message": "too old resource version: 5 (40)"}}
    server = Server(lists=[([pod("a", 5)], "5")], watches=[[gone]])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    with pytest.raises(client.ApiException) as err:
        informer.watch_once()
    assert err.value.status == 410


def _wait(what: str, cond: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_after_410_the_cache_is_relisted_and_untrusted_until_then() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    server = Server(lists=[([pod("a", 5), pod("b", 6)], "6"), ([pod("a", 50)], "51")],
                    watches=[[event("MODIFIED", pod("b", 7)), gone]])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    server.list_gate.clear()  # the relist after the 410 waits until the test has looked
    informer.start()
    try:
        _wait("the 410 seen", lambda: informer.items() is None)
        # Between the 410 and the relist, readers list for themselves: no cached answer at all.
        assert informer.items() is None and not informer.synced
        server.list_gate.set()
        _wait("relisted", lambda: informer.relists == 2 and informer.items() is not None)
        assert names(informer) == {"a": "50"}  # b was deleted while the watch was gone: the relist drops it
        rewatch = [c for c in server.calls if c.get("watch")][-1]
        assert rewatch["resource_version"] == "51"
    finally:
        informer.stop()
    assert informer.items() is None  # a stopped cache is never read


def test_a_broken_stream_is_relisted_after_a_pause() -> None:
    import urllib3

    server = Server(lists=[([pod("a", 5)], "5"), ([pod("a", 9)], "9")],
                    watches=[urllib3.exceptions.ProtocolError("connection reset")])
    informer = Informer(server.listing(), "shop")
    informer.relist()
    server.list_gate.clear()
    informer.start()
    try:
        _wait("the broken stream seen", lambda: not informer.synced)
        assert informer.items() is None
        server.list_gate.set()
        _wait("relisted", lambda: informer.items() is not None)
        assert names(informer) == {"a": "9"}
    finally:
        informer.stop()


def test_a_kind_that_is_not_served_stays_uncached() -> None:
    server = Server(lists=[client.ApiException(status=404, reason="Not Found")], watches=[])
    informer = Informer(server.listing(optional=True))
    informer.relist()
    assert informer.items() is None and not informer.synced


class Reader(ClusterReader):
    """The real reader, counting the listings it sends."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient())
        self.fetched: list[tuple[str, str | None]] = []

    def _fetch(self, kind: str, namespace: str | None, **kwargs: Any) -> list[dict[str, Any]]:
        self.fetched.append((kind, namespace))
        return [pod("listed", 99)]


def test_the_reader_reads_a_current_cache_and_lists_when_it_is_not() -> None:
    reader = Reader()
    server = Server(lists=[([pod("a", 10)], "10")], watches=[])
    informer = Informer(server.listing(), "shop", list_options=LIST_OPTIONS["Pod"])
    reader.informers[("Pod", "shop")] = informer
    informer.relist()
    read = reader._list("Pod", ("shop",), **LIST_OPTIONS["Pod"])
    assert [o["metadata"]["name"] for o in read] == ["a"] and reader.fetched == [] and reader.fallbacks == 0
    # Another namespace, or other options than the cache's, are listed.
    assert [o["metadata"]["name"] for o in reader._list("Pod", ("other",), **LIST_OPTIONS["Pod"])] == ["listed"]
    assert reader._list("Pod", ("shop",))[0]["metadata"]["name"] == "listed"
    informer.mark_broken("test")
    assert reader._list("Pod", ("shop",), **LIST_OPTIONS["Pod"])[0]["metadata"]["name"] == "listed"
    assert reader.fetched == [("Pod", "other"), ("Pod", "shop"), ("Pod", "shop")] and reader.fallbacks == 1
