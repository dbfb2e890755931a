"""Canary analyses (pure): the application's own metrics as a gate of each batch's bake, as values.

Owns what an analysis is (a PromQL query template, a condition against a fixed threshold or against the same
query's value before the batch, an interval, a failure limit, and what an error or an empty answer counts as),
parsing it from a ResizePolicy's ``spec.analyses`` or from a workload's ``podtailor.io/analyses`` annotation,
rendering it for one workload's pods of a batch, judging one measurement and counting failures. The model
follows Argo Rollouts' AnalysisTemplate metrics (``successCondition``, ``interval``, ``failureLimit``:
rollout/analysis/analysis.go ``assessMetricStatus`` fails a metric once its failures exceed the limit) and
Flagger's metric checks (``thresholdRange``). Template placeholders are replaced by PromQL string literals,
escaped by ``podtailor.promql`` exactly as the recommender's queries are: ``{{namespace}}`` and
``{{workload}}`` by quoted values, ``{{pods}}`` by a quoted regex matching exactly the batch's pods of that
workload (use it with ``=~``). An analysis from a workload's annotation (set by whoever owns the namespace) is
*namespaced*: every selector of its query is confined to the workload's namespace (``selectors.confine``).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podtailor.numeric import is_finite_number, is_int
from podtailor.promql import quote, regex_literal
from updater.policy.selectors import QueryError, check_query, confine

ANNOTATION = "podtailor.io/analyses"
"""On a workload (Deployment, StatefulSet, ...): a JSON list of analyses for that workload alone (namespaced)."""
_PLACEHOLDER = re.compile(r"\{\{\s*([a-zA-Z_]*)\s*\}\}")
_FIELDS = frozenset({"name", "query", "condition", "interval", "failureLimit", "onError"})
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DURATION = re.compile(r"^([0-9]{1,6})(s|m|h)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


class AnalysisError(ValueError):
    """An analysis that cannot be used as written; the message names where it is and the field."""


class Operator(enum.StrEnum):
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class OnError(enum.StrEnum):
    """What a query that errors or returns no value counts as: never a pass."""

    FAIL = "Fail"
    """A failed measurement (counted toward the failure limit)."""
    SKIP = "Skip"
    """No measurement: logged, counted in the metric, and the next interval measures again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """``value <operator> bound``, where bound is ``threshold``, or ``baseline_ratio`` times the baseline."""

    operator: Operator
    threshold: float | None = None
    baseline_ratio: float | None = None

    def __post_init__(self) -> None:
        if (self.threshold is None) == (self.baseline_ratio is None):
            raise AnalysisError("a condition has exactly one of threshold and baselineRatio")

    def bound(self, baseline: float | None) -> float | None:
        """The value the measurement is compared with; None when it needs a baseline there is not."""
        if self.threshold is not None:
            return self.threshold
        assert self.baseline_ratio is not None
        return None if baseline is None else self.baseline_ratio * baseline

    def holds(self, value: float, bound: float) -> bool:
        match self.operator:
            case Operator.LT:
                return value < bound
            case Operator.LE:
                return value <= bound
            case Operator.GT:
                return value > bound
            case Operator.GE:
                return value >= bound

    def worst(self, values: Sequence[float]) -> float:
        """Of several series, the one furthest on the failing side: the largest for < and <=, else the smallest."""
        return max(values) if self.operator in (Operator.LT, Operator.LE) else min(values)

    def text(self) -> str:
        if self.threshold is not None:
            return f"{self.operator.value} {self.threshold:g}"
        return f"{self.operator.value} {self.baseline_ratio:g} x baseline"


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    name: str
    query: str
    """The template: PromQL with ``{{namespace}}``, ``{{workload}}`` and ``{{pods}}`` placeholders."""
    condition: Condition
    interval_s: float = 60.0
    """Seconds between measurements during a bake (default 1m)."""
    failure_limit: int = 0
    """Failed measurements tolerated: the analysis fails at failure ``failure_limit + 1`` (default 0)."""
    on_error: OnError = OnError.FAIL
    namespaced: bool = False
    """From a workload's annotation: every selector is confined to the workload's namespace."""

    def render(self, *, namespace: str, workload: str, pods: Sequence[str]) -> str:
        """The query for one workload's pods of a batch (``QueryError`` if it cannot be confined)."""
        values = {"namespace": quote(namespace), "workload": quote(workload),
                  "pods": regex_literal(sorted(set(pods)) or [""])}
        text = _PLACEHOLDER.sub(lambda m: values[m[1]], self.query)
        return confine(text, namespace) if self.namespaced else text


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One answer to a rendered query: its values (one per series), or why there is none."""

    values: tuple[float, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """A judged measurement: ``passed`` True, False, or None (skipped by the on-error policy), and why."""

    passed: bool | None
    value: float | None
    bound: float | None
    reason: str


def _usable(m: Measurement) -> tuple[float, ...]:
    return tuple(v for v in m.values if not math.isnan(v))


def judge(analysis: Analysis, m: Measurement, baseline: float | None) -> Verdict:
    """The verdict on one measurement: an error, no (non-NaN) value, or no baseline for a ratio follow
    ``on_error``; otherwise the worst series against the bound."""
    values = _usable(m)
    bound = analysis.condition.bound(baseline)
    problem = m.error or ("the query returned no value" if not values else "")
    if not problem and bound is None:
        problem = "no baseline value from before the batch"
    if problem:
        failed = analysis.on_error == OnError.FAIL
        return Verdict(passed=False if failed else None, value=None, bound=bound,
                       reason=f"{problem} (onError {analysis.on_error.value})")
    assert bound is not None
    value = analysis.condition.worst(values)
    ok = analysis.condition.holds(value, bound)
    return Verdict(passed=ok, value=value, bound=bound,
                   reason=f"value {value:g} {'meets' if ok else 'breaks'} {analysis.condition.text()} "
                          f"(bound {bound:g})")


def baseline_of(analysis: Analysis, m: Measurement) -> float | None:
    """The baseline a ratio condition compares with: the worst series before the batch (None: no value)."""
    values = _usable(m)
    return analysis.condition.worst(values) if values and not m.error else None


def failed(analysis: Analysis, failures: int) -> bool:
    return failures > analysis.failure_limit


# ------------------------------------------------------------------------------------------------- parsing
def _duration_s(text: object, where: str) -> float:
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or int(match[1]) == 0:
        raise AnalysisError(f"{where}: {text!r} is not a duration like 30s, 1m or 1h")
    return int(match[1]) * _UNIT_S[match[2]]


def _number(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if not is_finite_number(value):
        raise AnalysisError(f"{where}.{key}: {value!r} is not a finite number")
    return float(value)


def _condition(raw: object, where: str) -> Condition:
    if not isinstance(raw, Mapping) or not set(raw) <= {"operator", "threshold", "baselineRatio"}:
        raise AnalysisError(f"{where}: must be an object with operator and threshold or baselineRatio")
    try:
        operator = Operator(str(raw.get("operator")))
    except ValueError:
        raise AnalysisError(f"{where}.operator: {raw.get('operator')!r} is not one of < <= > >=") from None
    ratio = _number(raw, "baselineRatio", where)
    if ratio is not None and ratio <= 0:
        raise AnalysisError(f"{where}.baselineRatio: {ratio:g} must be positive")
    try:
        return Condition(operator=operator, threshold=_number(raw, "threshold", where), baseline_ratio=ratio)
    except AnalysisError as err:
        raise AnalysisError(f"{where}: {err}") from None


def _query(raw: object, where: str, namespaced: bool) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise AnalysisError(f"{where}: must be a non-empty PromQL query")
    unknown = {m[1] for m in _PLACEHOLDER.finditer(raw)} - {"namespace", "workload", "pods"}
    if unknown:
        raise AnalysisError(f"{where}: unknown placeholders {sorted(unknown)} (use namespace, workload, pods)")
    probe = Analysis(name="probe", query=raw, condition=Condition(operator=Operator.LE, threshold=0.0),
                     namespaced=namespaced)
    try:  # rendered with sample values, so that the placeholders stand where string literals may
        check_query(probe.render(namespace="default", workload="web", pods=["web-0", "web-1"]))
    except QueryError as err:
        raise AnalysisError(f"{where}: {err}") from None
    return raw


def parse_analysis(raw: object, where: str, *, namespaced: bool) -> Analysis:
    if not isinstance(raw, Mapping):
        raise AnalysisError(f"{where}: must be an object with name, query and condition")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise AnalysisError(f"{where}: unknown fields {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or _NAME.match(name) is None:
        raise AnalysisError(f"{where}.name: {name!r} is not a lowercase name (a-z, 0-9, -; at most 63)")
    limit = raw.get("failureLimit", 0)
    if not is_int(limit) or not 0 <= limit <= 100:
        raise AnalysisError(f"{where}.failureLimit: {limit!r} is not an integer in [0, 100]")
    try:
        on_error = OnError(raw.get("onError", OnError.FAIL.value))
    except ValueError:
        raise AnalysisError(f"{where}.onError: {raw.get('onError')!r} is not Fail or Skip") from None
    return Analysis(name=name, query=_query(raw.get("query"), f"{where}.query", namespaced),
                    condition=_condition(raw.get("condition"), f"{where}.condition"),
                    interval_s=_duration_s(raw.get("interval", "1m"), f"{where}.interval"),
                    failure_limit=limit, on_error=on_error, namespaced=namespaced)


def parse_analyses(raw: object, where: str, *, namespaced: bool) -> tuple[Analysis, ...]:
    """A list of analyses with distinct names (at most 10)."""
    if not isinstance(raw, list) or len(raw) > 10:
        raise AnalysisError(f"{where}: must be a list of at most 10 analyses")
    out = tuple(parse_analysis(a, f"{where}[{i}]", namespaced=namespaced) for i, a in enumerate(raw))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise AnalysisError(f"{where}: analysis names must be distinct, got {names}")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadAnalyses:
    """A workload's own analyses (its annotation), or why the annotation cannot be used: a workload whose
    annotation does not parse is not resized (its batch fails before anything is sent), never resized without
    the gate its owners asked for."""

    analyses: tuple[Analysis, ...] = ()
    error: str = ""


def from_annotation(text: str, where: str) -> WorkloadAnalyses:
    try:
        return WorkloadAnalyses(analyses=parse_annotation(text, where))
    except AnalysisError as err:
        return WorkloadAnalyses(error=str(err))


def parse_annotation(text: str, where: str) -> tuple[Analysis, ...]:
    """A workload's ``podtailor.io/analyses`` annotation (a JSON list): namespaced analyses."""
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise AnalysisError(f"{where}: not JSON: {err}") from None
    return parse_analyses(raw, where, namespaced=True)
