"""Running a backtest: every strategy and reference row over every series, in worker processes, into a result.

Owns the orchestration and the result value. Series stream from a trace (``run_trace``) or come from
Prometheus-style history (``run_history``: ``dict[ContainerKey, UsageBatch]``, one batch per container holding
its whole history, as ``recommender.sources`` builds them); each series is replayed under each strategy in a
worker (``workers`` processes; 1 runs inline) and scored, and the scores are summed per strategy over three
subsets: ``all``, ``odd`` and ``even`` series (by the number at the end of the series id, or the series' position
in the input when it has none), so a strategy tuned on the odd half can be reported on the held-out even half.
The reference rows (``REFERENCES``) know the future and are not strategies: ``oracle`` (``replay.oracle``) and
``oracle-budget`` (``budget.oracle_budget``, which takes its budget from its baseline's scores on the same
series, so it runs after it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from podtailor.resources import CurrentResources
from recommender.backtest.budget import BudgetParams, oracle_budget
from recommender.backtest.replay import ReplayConfig, fleet_of, make_grid, oracle, replay
from recommender.backtest.scoring import Metrics, Totals, metrics, score
from recommender.backtest.trace import ReadStats, Series, TraceColumns, read_trace
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, FloatArray, UsageBatch

ORACLE = "oracle"
ORACLE_BUDGET = "oracle-budget"
REFERENCES = (ORACLE, ORACLE_BUDGET)
"""Reference rows that know the future: shown in every table, never selectable as a real strategy."""
SUBSETS = ("all", "odd", "even")
UNSCORED_SHORT = "fewer than 2 usable samples"
UNSCORED_WARMUP = "no sample after the warm-up"
UNSCORED_UNUSABLE = "no usable row"


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategySpec:
    """A strategy by registry name with parameter overrides (picklable, rebuilt in each worker)."""

    name: str
    overrides: tuple[tuple[str, Any], ...] = ()
    label: str = ""
    """The row's name when one strategy runs more than once (a sweep: "podtailor risk=2"); empty: ``name``."""

    @property
    def key(self) -> str:
        """The row's name in the result and the report: ``label`` or else ``name``."""
        return self.label or self.name

    def parameters(self) -> dict[str, Any]:
        if self.name == ORACLE:
            return {"knows_future": True, "request": "peak of the step being provisioned", "limit": "= request"}
        if self.name == ORACLE_BUDGET:
            p = self.budget_params()
            return {"knows_future": True, "baseline": p.baseline,
                    "block_hours": p.block_hours if p.block_hours is not None
                    else "ceil(scored hours / (baseline changes on the series + 1))",
                    "memory": ("levels spending the baseline's OOM-equivalents on the series" if p.memory_ooms
                               else "request = limit = peak of the block (no OOM)"),
                    "cpu_request": ("per block, the baseline's over-request share of the block's time"
                                    if p.cpu_split == "equal" else
                                    "per block, seconds over it summed over the series <= the baseline's, "
                                    "split by one price per second over"),
                    "cpu_limit": "peak of the block"}
        return get_strategy(self.name, **dict(self.overrides)).parameters()

    def budget_params(self) -> BudgetParams:
        """The ``oracle-budget`` row's parameters (unknown overrides raise ``TypeError``)."""
        return BudgetParams(**dict(self.overrides))


@dataclass(slots=True)
class BacktestResult:
    """Per subset and strategy the summed ``Totals``; ``metrics()`` derives the report's figures."""

    strategies: list[StrategySpec]
    config: ReplayConfig
    totals: dict[str, dict[str, Totals]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    read_stats: ReadStats = field(default_factory=ReadStats)
    source: str = ""
    unscored: dict[str, int] = field(default_factory=dict)
    """Series replayed but not scored, per reason (``UNSCORED_*``): they count in no row of the table."""

    def metrics(self) -> dict[str, dict[str, Metrics]]:
        return {sub: {name: metrics(t) for name, t in per.items()} for sub, per in self.totals.items()}

    def series_days_per_s(self) -> float:
        days = self.totals.get("all", {}).get(ORACLE, Totals()).series_days
        return days / self.elapsed_s if self.elapsed_s > 0 else 0.0


def parity(series_id: str, position: int) -> str:
    match = re.search(r"(\d+)$", series_id)
    number = int(match.group(1)) if match else position
    return "odd" if number % 2 else "even"


def score_series(series: Series, specs: list[StrategySpec], cfg: ReplayConfig) -> dict[str, Totals]:
    """Replay one series under every strategy and score it; the reference rows when listed (the budgeted
    oracle after its baseline, whose ``Totals`` on this series set its budget)."""
    if len(series) < 2:
        return {}
    grid = make_grid(series, cfg)
    out: dict[str, Totals] = {}
    for spec in sorted(specs, key=lambda s: s.name == ORACLE_BUDGET):
        if spec.name == ORACLE:
            plan = oracle(series, cfg, grid)
        elif spec.name == ORACLE_BUDGET:
            params = spec.budget_params()
            if params.baseline not in out:  # the baseline by its row name
                raise ValueError(f"{ORACLE_BUDGET} needs its baseline {params.baseline!r} among the strategies")
            plan = oracle_budget(series, cfg, grid, out[params.baseline], params)
        else:
            plan = replay(series, get_strategy(spec.name, **dict(spec.overrides)), cfg, grid)
        out[spec.key] = score(series, plan, grid)
    return {spec.key: out[spec.key] for spec in specs}


def _work(args: tuple[Series, list[StrategySpec], ReplayConfig]) -> dict[str, Totals]:
    return score_series(*args)


def _results(series: Iterable[Series], specs: list[StrategySpec], cfg: ReplayConfig,
             workers: int) -> Iterator[tuple[str, dict[str, Totals]]]:
    if workers <= 1:
        for s in series:
            yield s.series_id, score_series(s, specs, cfg)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: list[tuple[str, Future[dict[str, Totals]]]] = []
        for s in series:
            pending.append((s.series_id, pool.submit(_work, (s, specs, cfg))))
            while len(pending) >= 4 * workers:  # bounded: the reader never runs far ahead of the workers
                sid, fut = pending.pop(0)
                yield sid, fut.result()
        for sid, fut in pending:
            yield sid, fut.result()


def run_series(series: Iterable[Series], specs: list[StrategySpec], cfg: ReplayConfig, *, workers: int = 1,
               limit: int | None = None, source: str = "", stats: ReadStats | None = None) -> BacktestResult:
    """Backtest every strategy of ``specs`` over ``series`` (at most ``limit`` of them)."""
    names = [spec.key for spec in specs]
    if len(set(names)) < len(names):
        raise ValueError(f"two strategies share a row name among {', '.join(names)}: give each a label")
    for spec in specs:
        if spec.name == ORACLE_BUDGET and spec.budget_params().baseline not in names:
            raise ValueError(f"{ORACLE_BUDGET} needs its baseline {spec.budget_params().baseline!r} "
                             "among the strategies")
    started = time.perf_counter()
    chosen: Iterable[Series] = series if limit is None else islice(series, max(limit, 0))  # stops after the N-th
    if cfg.fleet is None:  # the fleet's sizes from every series' warm-up: the series are read first
        chosen = list(chosen)
        cfg = replace(cfg, fleet=fleet_of(chosen, cfg))
    result = BacktestResult(strategies=specs, config=cfg, source=source, read_stats=stats or ReadStats())
    result.totals = {sub: {spec.key: Totals() for spec in specs} for sub in SUBSETS}
    for position, (sid, per) in enumerate(_results(chosen, specs, cfg, workers), start=1):
        reason = UNSCORED_SHORT if not per else UNSCORED_WARMUP if all(t.series == 0 for t in per.values()) else None
        if reason is not None:
            result.unscored[reason] = result.unscored.get(reason, 0) + 1
            continue
        for sub in ("all", parity(sid, position)):
            for name, t in per.items():
                result.totals[sub][name] = result.totals[sub][name] + t
    if result.read_stats.unusable_series:
        result.unscored[UNSCORED_UNUSABLE] = result.read_stats.unusable_series
    result.elapsed_s = time.perf_counter() - started
    return result


def run_trace(path: Path, specs: list[StrategySpec], cfg: ReplayConfig, *, columns: TraceColumns | None = None,
              workers: int = 1, limit: int | None = None) -> BacktestResult:
    """Backtest a tidy trace CSV (see ``recommender.backtest.trace``), streamed series by series."""
    stats = ReadStats()
    if cfg.fleet is None:  # a first read for the fleet's sizes, so the replay still streams
        first = read_trace(path, columns)
        cfg = replace(cfg, fleet=fleet_of(first if limit is None else islice(first, max(limit, 0)), cfg))
    series = read_trace(path, columns, stats=stats)
    return run_series(series, specs, cfg, workers=workers, limit=limit, source=str(path), stats=stats)


def _busiest(timestamps_s: FloatArray, values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Sorted distinct timestamps and, at each, the largest value (NaN only where every value is NaN)."""
    ts, inverse = np.unique(timestamps_s, return_inverse=True)
    out = np.full(ts.size, np.nan)
    np.fmax.at(out, inverse, values)
    return ts, out


def series_from_history(history: Mapping[ContainerKey, UsageBatch],
                        current: Mapping[ContainerKey, CurrentResources] | None = None) -> Iterator[Series]:
    """Prometheus-style history as ``Series``: memory aligned to the CPU timestamps (the latest reading at or
    before each, NaN before the first); the provisioned amount is the current limit, else the request.

    A workload's batch holds every pod's samples (its replicas, and the pods of earlier rollouts), so several
    share a timestamp. The replay gives each series one value per step, so a workload is replayed as its
    busiest replica at each timestamp (the max over pods, CPU and memory apart): the replica that decides OOM
    kills and CPU time over the request. Its slack is that of the busiest replica, a lower bound of the
    replicas' average."""
    for key, batch in sorted(history.items()):
        ts, cpu = _busiest(batch.cpu_cores.timestamps_s, batch.cpu_cores.values)
        if ts.size < 2:
            continue
        mem = None
        if len(batch.memory_peak_bytes):
            mts, mval = _busiest(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values)
            idx = np.searchsorted(mts, ts, side="right") - 1
            mem = np.where(idx >= 0, mval[np.maximum(idx, 0)], np.nan)
            mem = np.where(mem > 0, mem, np.nan)
        res = current.get(key) if current else None
        cpu_prov = mem_prov = None
        if res is not None:
            cpu_m = res.limits.cpu_millicores or res.requests.cpu_millicores
            mem_b = res.limits.memory_bytes or res.requests.memory_bytes
            cpu_prov = None if cpu_m is None else np.full(ts.size, cpu_m / 1000.0)
            mem_prov = None if mem_b is None else np.full(ts.size, float(mem_b))
        sid = f"{key.namespace}/{key.workload_kind}/{key.workload_name}/{key.container}"
        yield Series(series_id=sid, timestamps_s=ts, cpu_cores=cpu, memory_bytes=mem,
                     cpu_provisioned_cores=cpu_prov, memory_provisioned_bytes=mem_prov)


def run_history(history: Mapping[ContainerKey, UsageBatch], specs: list[StrategySpec], cfg: ReplayConfig, *,
                current: Mapping[ContainerKey, CurrentResources] | None = None, workers: int = 1) -> BacktestResult:
    """Backtest Prometheus-style history (for ``recommender.sources``; see ``series_from_history``)."""
    return run_series(series_from_history(history, current), specs, cfg, workers=workers, source="history")
