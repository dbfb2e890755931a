"""What the parsers that share ``podtailor.numeric`` decide and say for a bool, a NaN, an infinity and numpy
scalars, pinned at their public entry points: the messages are the ones each parser wrote before the checks
were shared (these tests pass on the code before and after that change)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from podtailor.kube.fields import MalformedObject
from podtailor.resize.boost import BoostError, parse_boost
from recommender.kube.checkpoint_pack import pack, unpack
from recommender.kube.fleet_share import decode, encode
from recommender.model.fleet import FleetSums
from recommender.model.histogram import VPA_CPU_BUCKETS, DecayingHistogram
from recommender.model.peaks import SlotMax
from recommender.model.podtailor_params import check_risk
from recommender.report.pricing import PriceError, parse_sheet
from recommender.sources.config import sized_in_flight
from updater.kube.fields import integer
from updater.kube.workloads import WorkloadIndex
from updater.policy.analysis import AnalysisError, parse_analysis

NOW = 1_700_000_000.0
SLOTS = {"slot_s": 3600.0, "retention_s": 86400.0}


@pytest.mark.parametrize(("bad", "message"), [
    ({"first": True, "maxima": [4], "counts": [1]}, "first is not an integer"),
    ({"first": 0, "maxima": [4], "counts": [True]}, "slot 0 has count True with maximum 4"),
    ({"first": 0, "maxima": [True], "counts": [1]}, "slot maxima: True is not a finite number"),
    ({"first": 0, "maxima": [math.inf], "counts": [1]}, "slot maxima: inf is not a finite number"),
    ({"first": np.int64(0), "maxima": [4], "counts": [1]}, "first is not an integer"),
])
def test_slot_maxima_refuse_bools_infinities_and_numpy_ints(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlotMax.from_checkpoint({**SLOTS, **bad})


def test_slot_maxima_take_a_numpy_float64_peak_as_a_float() -> None:
    slots = SlotMax.from_checkpoint({**SLOTS, "first": 5, "maxima": [np.float64(2.5)], "counts": [3]})
    assert slots.maxima == {5: 2.5} and type(slots.maxima[5]) is float and slots.counts == {5: 3}


def _histogram_data() -> dict[str, Any]:
    hist = DecayingHistogram(VPA_CPU_BUCKETS, 86400.0)
    hist.add(np.array([0.3]), np.array([NOW]), 1.0)
    data = json.loads(json.dumps(hist.to_checkpoint()))
    assert isinstance(data["weights"], list) and len(data["weights"]) == 1  # the range form, one bucket
    return dict(data)


@pytest.mark.parametrize(("change", "message"), [
    ({"weights_from": True}, r"histogram weights: 1 from bucket True do not fit \d+ buckets"),
    ({"weights": [True]}, "histogram weights: not all finite numbers"),
    ({"weights": [math.nan]}, "histogram weights: not all finite numbers"),
    ({"weights": [-math.inf]}, "histogram weights: not all finite numbers"),
    ({"weights": [np.float32(1.0)]}, "histogram weights: not all finite numbers"),
])
def test_histogram_weights_refuse_bools_nan_infinities_and_float32(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecayingHistogram.from_checkpoint({**_histogram_data(), **change})


def test_histogram_weights_take_numpy_float64() -> None:
    data = _histogram_data()
    back = DecayingHistogram.from_checkpoint({**data, "weights": [np.float64(0.75)]})
    assert back.hist.weights[data["weights_from"]] == 0.75 and back.hist.weights.sum() == 0.75


@pytest.mark.parametrize("risk", [True, math.nan, math.inf, "1", np.int64(1)])
def test_check_risk_refuses_what_is_not_a_number_in_range(risk: object) -> None:
    with pytest.raises(ValueError, match=r"risk must be a number in \[0.05, 20\], got "):
        check_risk(risk)  # type: ignore[arg-type]


def test_check_risk_takes_ints_and_numpy_float64_as_floats() -> None:
    assert check_risk(1) == 1.0 and type(check_risk(1)) is float
    assert check_risk(np.float64(2.5)) == 2.5


@pytest.mark.parametrize(("raw", "message"), [
    ({"hoursPerMonth": True}, r"^f: hoursPerMonth must be a whole number in \[1, 744\]$"),
    ({"hoursPerMonth": 730.0}, r"^f: hoursPerMonth must be a whole number in \[1, 744\]$"),
    ({"cpuPerVcpuHour": True}, r"^f.cpuPerVcpuHour: expected a number, got True$"),
    ({"memoryPerGibHour": None}, r"^f.memoryPerGibHour: expected a number, got None$"),
])
def test_price_sheets_refuse_bools(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(PriceError, match=message):
        parse_sheet(raw, "f")


def test_price_sheets_take_numbers_strings_and_numpy_float64() -> None:
    sheet = parse_sheet({"cpuPerVcpuHour": np.float64(0.5), "memoryPerGibHour": "0.25", "hoursPerMonth": 700}, "f")
    assert (sheet.default.cpu_per_vcpu_hour, sheet.default.memory_per_gib_hour) == (Fraction(1, 2), Fraction(1, 4))
    assert sheet.hours_per_month == 700


@pytest.mark.parametrize(("procs", "in_flight"), [(8, 4), (3, 1), (64, 4), (True, 1), (8.0, 1), (np.int64(8), 1)])
def test_prometheus_sizing_reads_only_a_plain_int(procs: object, in_flight: int) -> None:
    assert sized_in_flight({"GOMAXPROCS": procs}) == in_flight  # 8 cores: half, 4; 64: capped at 4


def test_packed_states_keep_bools_apart_from_ints() -> None:
    tree = {"on": True, "off": False, "n": 3, "x": 2.5, "big": 2**70, "list": [1, True, 0.5]}
    back = unpack(pack(tree))
    assert back == tree
    assert [type(back[k]) for k in ("on", "off", "n", "x", "big")] == [bool, bool, int, float, int]
    assert [type(v) for v in back["list"]] == [int, bool, float]


@pytest.mark.parametrize("count", [True, 1.0, "1"])
def test_fleet_sums_refuse_counts_that_are_not_whole_numbers(count: object) -> None:
    doc = json.loads(encode(FleetSums.zero(), strategy="podtailor", published_s=NOW, pass_number=1))
    doc["cpuCount"] = count
    with pytest.raises(ValueError, match="counts must be whole numbers"):
        decode(json.dumps(doc))


@pytest.mark.parametrize(("cpu", "message"), [
    ({"type": "Factor", "factor": True}, r"^b.cpu.factor: True is not a number$"),
    ({"type": "Factor", "factor": math.inf}, r"^b.cpu.factor: inf is not a number$"),
    ({"type": "Factor", "factor": 2, "durationSeconds": True}, r"^b.cpu.durationSeconds: True is not a whole number"),
    ({"type": "Factor", "factor": 2, "durationSeconds": 3.0}, r"^b.cpu.durationSeconds: 3.0 is not a whole number"),
])
def test_startup_boosts_refuse_bools_and_infinities(cpu: dict[str, Any], message: str) -> None:
    with pytest.raises(BoostError, match=message):
        parse_boost({"cpu": cpu}, "b")


ANALYSIS = {"name": "errors", "query": "sum(rate(errors_total[1m]))"}


@pytest.mark.parametrize("threshold", [True, math.nan, math.inf, -math.inf, "0.5", np.float32(0.5)])
def test_analysis_thresholds_must_be_finite_numbers(threshold: object) -> None:
    raw = {**ANALYSIS, "condition": {"operator": "<", "threshold": threshold}}
    with pytest.raises(AnalysisError, match=r"^a.condition: a.condition.threshold: .* is not a finite number$"):
        parse_analysis(raw, "a", namespaced=True)


def test_analysis_takes_numpy_float64_and_int_limits() -> None:
    raw = {**ANALYSIS, "condition": {"operator": "<", "threshold": np.float64(0.5)}, "failureLimit": 2}
    analysis = parse_analysis(raw, "a", namespaced=True)
    assert (analysis.condition.threshold, analysis.failure_limit) == (0.5, 2)
    with pytest.raises(AnalysisError, match=r"^a.failureLimit: 2.0 is not an integer in \[0, 100\]$"):
        parse_analysis({**raw, "failureLimit": 2.0}, "a", namespaced=True)


@pytest.mark.parametrize("raw", [True, False, 3.0, "3", np.int64(3)])
def test_api_integers_refuse_bools_floats_and_numpy_ints(raw: object) -> None:
    with pytest.raises(MalformedObject, match=r"^x: .* is not an integer$"):
        integer(raw, "x")


def test_api_integers_take_ints_and_default_on_none() -> None:
    assert integer(3, "x") == 3 and integer(None, "x", 7) == 7


@pytest.mark.parametrize(("replicas", "counted"), [(3, 3), (0, 0), (True, 0), (-1, 0), (2.0, 0)])
def test_workload_replicas_count_only_plain_non_negative_ints(replicas: object, counted: int) -> None:
    index = WorkloadIndex()
    index.add("Deployment", [{"metadata": {"namespace": "ns", "name": "web"}, "spec": {"replicas": replicas}}])
    assert index.replicas[("ns", "Deployment", "web")] == counted


def test_a_bool_is_not_a_vpa_generation_nor_a_pod_deadline() -> None:
    """JSON ``true`` is not the integer 1: an unparsable VPA whose generation is ``true`` is reported with
    generation 0, and a pod whose activeDeadlineSeconds is ``true`` is not terminating (an int is)."""
    from recommender.kube.served import UnparsableVpa, read_vpa
    from updater.webhook.review import pod_resources

    vpa = read_vpa({"metadata": {"namespace": "ns", "name": "v", "uid": "u", "generation": True}, "spec": 7})
    assert isinstance(vpa, UnparsableVpa) and vpa.generation == 0
    vpa = read_vpa({"metadata": {"namespace": "ns", "name": "v", "uid": "u", "generation": 3}, "spec": 7})
    assert isinstance(vpa, UnparsableVpa) and vpa.generation == 3
    app = {"name": "app", "resources": {"requests": {"cpu": "100m"}}}
    assert not pod_resources({"containers": [app], "activeDeadlineSeconds": True}).terminating
    assert pod_resources({"containers": [app], "activeDeadlineSeconds": 30}).terminating


def test_an_analysis_threshold_too_large_for_a_float_is_refused_with_its_message() -> None:
    from updater.policy.analysis import AnalysisError, parse_analysis

    raw = {"name": "p99", "query": "up", "condition": {"operator": "<=", "threshold": 10**400},
           "interval": "30s", "failureLimit": 1, "onError": "Fail"}
    with pytest.raises(AnalysisError, match="is not a finite number"):
        parse_analysis(raw, "policy p", namespaced=False)
