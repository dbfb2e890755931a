"""Command-line parsing and configuration of ``podtailor-recommender``: flags in, frozen configs out.

Owns every flag, its default and its help text, the parsing of durations ("90s", "5m", "8d") and the
construction of the Kubernetes client, the Prometheus config and the strategy (``--strategy`` with
``--risk``, podtailor's risk setting, and ``--risk-budget``, its risk budget, which a VPA's
``podtailor.io/risk`` and ``podtailor.io/risk-budget`` annotations override for that VPA). Bad input is
reported as ``UsageError`` (exit code 2) before anything is contacted or changed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podtailor.runtime.cli import UsageError, duration_s
from recommender.model.podtailor_budget import RiskBudget, parse_budget
from recommender.model.podtailor_params import RISK_MAX, RISK_MIN, check_risk
from recommender.model.registry import DEFAULT_STRATEGY, STRATEGIES, AtRisk, at_risk, get_strategy
from recommender.model.types import HistoryPlan, Strategy
from recommender.sources.config import READ_APIS, PrometheusConfig

if TYPE_CHECKING:  # the engine (and its Kubernetes adapter) is imported by the commands that run it, not by report
    from recommender.engine import EngineConfig


def add_prometheus_flags(p: argparse.ArgumentParser, required: bool = True, *, plan: bool = True) -> None:
    """The Prometheus group; ``plan`` adds ``--full-resolution`` (commands that run one strategy)."""
    g = p.add_argument_group("Prometheus (or Thanos, Mimir, VictoriaMetrics)")
    g.add_argument("--prometheus-url", required=required, help="base URL with any path prefix, e.g. "
                   "http://prometheus.monitoring:9090 or https://mimir.example/prometheus"
                   + ("" if required else "; report and backtest --prometheus without it: the store found by its "
                      "Service's labels and reached through the API server's service proxy with the kubeconfig's "
                      "credentials (docs/commands.md)"))
    g.add_argument("--prometheus-bearer-token-file", type=Path, help="file with a bearer token (re-read per request)")
    g.add_argument("--prometheus-username", help="basic-auth user (password from --prometheus-password-file)")
    g.add_argument("--prometheus-password-file", type=Path, help="file holding the basic-auth password")
    g.add_argument("--prometheus-ca-file", type=Path, help="CA bundle to verify the server")
    g.add_argument("--prometheus-client-cert", type=Path, help="client certificate for mutual TLS")
    g.add_argument("--prometheus-client-key", type=Path, help="client key for mutual TLS")
    g.add_argument("--prometheus-insecure-skip-verify", action="store_true", help="do not verify TLS (tests only)")
    g.add_argument("--prometheus-header", action="append", default=[], metavar="NAME=VALUE",
                   help="extra header on every request, e.g. X-Scope-OrgID=team-a (repeatable)")
    g.add_argument("--cluster-label", help="label naming the cluster in a shared backend (e.g. cluster)")
    g.add_argument("--cluster-value", help="this cluster's value of --cluster-label")
    g.add_argument("--prometheus-timeout", type=duration_s, default=120.0, metavar="DURATION",
                   help="per-query timeout (default: 120s)")
    g.add_argument("--step", type=duration_s, default=60.0, metavar="DURATION",
                   help="history resolution: one CPU and one memory-peak sample per step (default: 60s)")
    g.add_argument("--scrape-interval", type=duration_s, default=30.0, metavar="DURATION",
                   help="cAdvisor scrape interval; the CPU rate window is max(4 x this, step) (default: 30s)")
    g.add_argument("--prometheus-requests-in-flight", type=_in_flight, default=None, metavar="N|auto",
                   help="queries of a pass sent at once, 1 to 16, or auto (the default): half the cores "
                        "Prometheus reports on its runtimeinfo page, 1 to 4, and 1 for a backend without that page; "
                        "at 1 each goes after the one before, while its answer is decoded; more uses more of the "
                        "backend's cores and holds up to N answers in memory; the number of queries stays the same")
    g.add_argument("--prometheus-read-api", choices=READ_APIS, default="auto",
                   help="how full-resolution samples are read: remote-read (/api/v1/read: the stored samples, "
                        "about a tenth of Prometheus's CPU), promql (range queries), or auto (the default): remote "
                        "read where the backend answers a one-millisecond probe read (Prometheus, Mimir), range "
                        "queries where it does not (Thanos Query, VictoriaMetrics)")
    if not plan:
        return
    g.add_argument("--full-resolution", action="store_true",
                   help="read all of the history at --step; by default history older than the strategy needs "
                        "at that resolution (podtailor: 3 days, vpa: 6 days; krr-simple: none) is read as "
                        "hourly CPU means and memory peaks, which moves no target by more than a histogram bucket")


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Recommendations")
    g.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="recommendation strategy (default: %(default)s; vpa and krr-simple reproduce those tools)")
    add_risk_flag(g)
    g.add_argument("--recommender-name", default="podtailor",
                   help="serve VPAs whose spec.recommenders names this (default: %(default)s)")
    g.add_argument("--serve-all-vpas", action="store_true",
                   help="also serve VPAs that name no recommender (instead of the VPA recommender)")
    g.add_argument("-n", "--namespace", action="append", default=[], help="only this namespace (repeatable)")
    g.add_argument("--history", type=duration_s, default=8 * 86400.0, metavar="DURATION",
                   help="history read for a VPA seen for the first time without a checkpoint (default: 8d)")
    g.add_argument("--checkpoint-every", type=duration_s, default=600.0, metavar="DURATION",
                   help="how often state is checkpointed in the API server (default: 10m)")
    g.add_argument("--pool-label", default="", metavar="KEY",
                   help="node label naming the pool of a DaemonSet's per-pool values (default: the updater's: the "
                        "first present of the common keys)")


def _in_flight(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, not {text[:32]!r}") from None


def risk_value(text: str) -> float:
    """``--risk``'s value: a number in [RISK_MIN, RISK_MAX] (argparse reports the error, exit 2)."""
    try:
        return check_risk(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a number in [{RISK_MIN:g}, {RISK_MAX:g}], got {text[:32]!r}") from None


def add_risk_flag(g: argparse._ActionsContainer) -> None:
    g.add_argument("--risk", type=risk_value, default=None, metavar="R",
                   help="podtailor's risk setting: divides both overrun prices (CPU time over the request, OOM "
                        "kills); 1 = the default prices, 2 = less slack and more overruns, 0.5 = the opposite. "
                        "Choose it with `backtest --sweep`. A VPA's podtailor.io/risk annotation overrides it "
                        "for that VPA (default: 1; podtailor strategy only)")
    add_budget_flag(g)


def budget_value(text: str) -> RiskBudget:
    """``--risk-budget``'s value (``podtailor_budget.parse_budget``; argparse reports the error, exit 2)."""
    try:
        return parse_budget(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_budget_flag(g: argparse._ActionsContainer) -> None:
    g.add_argument("--risk-budget", type=budget_value, default=None, metavar="cpu=SHARE,oom=KILLS",
                   help="podtailor's risk budget, held per container by a margin calibrated from its own overruns: "
                        "cpu= the share of time CPU usage may be above the request (0.01 = 1%%: the request starts "
                        "from recent usage's 99th percentile instead of the CPU price's level), oom= the OOM kills "
                        "a container may take per 30 days; either alone. A VPA's podtailor.io/risk-budget "
                        "annotation overrides it for that VPA (default: none, the prices alone; podtailor only)")


def build_strategy(args: argparse.Namespace) -> Strategy:
    """``--strategy`` at ``--risk`` and ``--risk-budget``; ``UsageError`` when either is given to a strategy
    without a risk setting."""
    given = {name: value for name, value in (("risk", args.risk), ("budget", getattr(args, "risk_budget", None)))
             if value is not None}
    if not given:
        return get_strategy(args.strategy)
    if at_risk(args.strategy) is None:
        flags = " and ".join({"risk": "--risk", "budget": "--risk-budget"}[n] for n in given)
        raise UsageError(f"{flags} {'are settings' if len(given) > 1 else 'is a setting'} of the podtailor "
                         f"strategy; {args.strategy} has none")
    return get_strategy(args.strategy, **given)


def strategy_at_risk(args: argparse.Namespace) -> AtRisk | None:
    """How the engine builds ``--strategy`` at a VPA's own risk and budget (None: the strategy has no risk
    setting); a VPA without a budget annotation keeps ``--risk-budget``."""
    build = at_risk(args.strategy)
    own: RiskBudget | None = getattr(args, "risk_budget", None)
    if build is None:
        return None
    builder: AtRisk = build

    def at(risk: float, budget: RiskBudget | None = None) -> Strategy:
        return builder(risk, own if budget is None else budget)

    return at


def _headers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
            raise UsageError(f"bad --prometheus-header {item.split('=')[0][:64]!r}: use NAME=VALUE")
        out[name] = value
    return out


def prometheus_config(args: argparse.Namespace, url: str | None = None) -> PrometheusConfig:
    """The flags' ``PrometheusConfig``; ``url`` (a found store's) instead of ``--prometheus-url``."""
    password = None
    if args.prometheus_password_file:
        try:
            password = args.prometheus_password_file.read_text().strip()
        except OSError as err:
            raise UsageError(f"cannot read --prometheus-password-file: {err}") from None
    kwargs: dict[str, Any] = dict(
        url=url or args.prometheus_url, bearer_token_file=args.prometheus_bearer_token_file,
        basic_auth_username=args.prometheus_username, basic_auth_password=password,
        ca_file=args.prometheus_ca_file, client_cert_file=args.prometheus_client_cert,
        client_key_file=args.prometheus_client_key, insecure_skip_verify=args.prometheus_insecure_skip_verify,
        extra_headers=_headers(args.prometheus_header), cluster_label=args.cluster_label,
        cluster_value=args.cluster_value, timeout_s=args.prometheus_timeout, step_s=int(args.step),
        scrape_interval_s=args.scrape_interval, requests_in_flight=args.prometheus_requests_in_flight,
        read_api=args.prometheus_read_api)
    try:
        return PrometheusConfig(**kwargs)
    except ValueError as err:
        raise UsageError(f"bad Prometheus settings: {err}") from None


_STORE_OWN_FLAGS = ("prometheus_bearer_token_file", "prometheus_username", "prometheus_password_file",
                    "prometheus_ca_file", "prometheus_client_cert", "prometheus_client_key",
                    "prometheus_insecure_skip_verify")


def check_found_store_flags(args: argparse.Namespace) -> None:
    """Without ``--prometheus-url`` the store is found by its Service and reached through the API server's
    service proxy with the kubeconfig's credentials: the store's own auth and TLS flags have no use there.
    UsageError, before anything is contacted."""
    given = [f"--{name.replace('_', '-')}" for name in _STORE_OWN_FLAGS if getattr(args, name, None)]
    if given:
        raise UsageError(f"{', '.join(given)} need --prometheus-url: without it the store is reached through the "
                         "API server's service proxy with the kubeconfig's credentials")


def found_store(args: argparse.Namespace, api: Any) -> PrometheusConfig | int:
    """The config of the store found by its Service through ``api`` (an ``ApiClient``), the flags' settings
    kept (``store_service.store_config``), or the exit code with the reason on stderr: 2 when none was found
    or Services cannot be listed (the message names --prometheus-url), 1 when the API server fails."""
    from podtailor.kube.errors import KubeError
    from recommender.kube.store_service import store_config

    hint = tuple(getattr(args, "namespace", None) or ())
    try:
        return store_config(api, hint, lambda url: prometheus_config(args, url=url))
    except UsageError as err:  # store_service.StoreNotFound among them
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KubeError as err:
        print(f"error: Kubernetes API, finding the metrics store: {err}", file=sys.stderr)
        return 1


def history_plan(args: argparse.Namespace, strategy: Strategy) -> HistoryPlan:
    """The strategy's query plan; with ``--full-resolution`` everything at the step, what it reads per pod kept."""
    plan = strategy.history_plan()
    return HistoryPlan(per_pod_memory=plan.per_pod_memory) if getattr(args, "full_resolution", False) else plan


def engine_config(args: argparse.Namespace) -> EngineConfig:
    from recommender.engine import EngineConfig

    return EngineConfig(recommender_name=args.recommender_name, serve_all=args.serve_all_vpas,
                        history_s=args.history, checkpoint_every_s=args.checkpoint_every,
                        namespaces=tuple(args.namespace), pool_label=args.pool_label)
