"""Printing a ``Report``: the terminal table (rich), JSON, YAML, CSV and Markdown (for a pull request).

Owns the text formats; the HTML page is in ``html``. Every format takes the whole report and returns a
string (the CLI writes it to stdout or a file), so nothing but the report reaches stdout. Human formats
show quantities as Kubernetes writes them ("250m", "1.5Gi") and money in the sheet's currency with cents;
JSON and YAML carry exact integers (see ``document``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

import orjson
import yaml
from rich.console import Console
from rich.table import Table

from podtailor.resources import Resources, human
from podtailor.units import format_cpu, human_memory
from recommender.report.document import rfc3339, to_document
from recommender.report.pricing import format_money
from recommender.report.types import ContainerReport, Cost, GroupSummary, Report, WorkloadReport

FORMATS = ("table", "json", "yaml", "csv", "markdown", "html")
_DISRUPTION_STYLE = {"none": "dim", "in-place": "green", "in-place-restart": "yellow", "replacement": "red",
                     "left-alone": "dim"}


def fmt_cpu(millicores: int | None) -> str:
    return "-" if millicores is None else format_cpu(millicores)


def fmt_memory(value: int | float | None) -> str:
    return "-" if value is None else human_memory(value)


def pair(res: Resources) -> str:
    return human(res)


def money(report: Report, micros: int, *, signed: bool = False) -> str:
    return format_money(micros, str(report.prices.get("currency", "USD")), signed=signed)


def _target(c: ContainerReport) -> Resources:
    return c.recommendation.target if c.recommendation is not None else Resources()


def reasons(c: ContainerReport) -> str:
    """Why the recommendation is what it is (kept, clamped, capped, raised, no history), "; "-joined."""
    why = "; ".join(c.recommendation.reasons) if c.recommendation is not None else "no usage history"
    return why if c.budget is None else f"{why}; {c.budget.text()}" if why else c.budget.text()


def _risks(w: WorkloadReport) -> str:
    return ", ".join(r.risk.value for r in w.risks)


def _headline(report: Report) -> str:
    t = report.total.cost
    return (f"{report.total.workloads} workloads, {report.total.containers} containers; strategy {report.strategy}; "
            f"history {rfc3339(report.start_s)} .. {rfc3339(report.end_s)}. Monthly: current "
            f"{money(report, t.current)}, recommended {money(report, t.recommended)} (savings "
            f"{money(report, t.savings)}, increases {money(report, t.increases)}, "
            f"net {money(report, t.net, signed=True)})")


# ---------------------------------------------------------------------------------------------------- table
def table(report: Report, width: int | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width or 200, force_terminal=False, color_system=None)
    grid = Table(title=_headline(report), show_lines=False)
    many = bool(report.clusters)  # a cluster column only in a report over several clusters
    for col in ("cluster",) * many + ("namespace", "kind/name", "container", "pool", "pods", "requests now cpu / mem",
                "recommended cpu / mem", "limits now -> planned", "cost now", "cost new", "disruption", "risks",
                "why"):
        grid.add_column(col, overflow="fold")
    for w in report.workloads:
        for i, c in enumerate(w.containers):
            first = i == 0
            grid.add_row(*((w.cluster if first else "",) * many), w.namespace if first else "",
                         f"{w.kind}/{w.name}" if first else "",
                         f"{c.name} ({c.role.value})" if c.role.value != "container" else c.name,
                         (w.pool or "-") if first else "", f"{w.running_pods}/{w.replicas}" if first else "",
                         pair(c.current.requests), pair(_target(c)),
                         f"{pair(c.current.limits)} -> {pair(c.planned.limits)}",
                         money(report, c.cost.current), money(report, c.cost.recommended),
                         f"[{_DISRUPTION_STYLE[w.disruption.value]}]{w.disruption.value}[/]" if first else "",
                         _risks(w) if first else "", reasons(c))
    console.print(grid)
    if many:
        console.print(_groups_table(report, "cluster", report.clusters))
    console.print(_groups_table(report, "namespace", report.namespaces))
    console.print(_groups_table(report, "node pool", report.pools))
    for warning in report.warnings:
        console.print(f"warning: {warning}")
    return out.getvalue()


def _groups_table(report: Report, title: str, groups: Iterable[GroupSummary]) -> Table:
    t = Table(title=f"By {title}")
    for col in (title, "workloads", "containers", "current", "recommended", "savings", "increases", "net"):
        t.add_column(col)
    for g in [*groups, report.total]:
        c = g.cost
        t.add_row(g.name or "-", str(g.workloads), str(g.containers), money(report, c.current),
                  money(report, c.recommended), money(report, c.savings), money(report, c.increases),
                  money(report, c.net, signed=True))
    return t


# -------------------------------------------------------------------------------------------- machine formats
def as_json(report: Report) -> str:
    """The document as indented JSON, UTF-8 as it is (orjson: the same text as ``json.dumps(indent=2)`` for
    ASCII, about 20 times faster on a 1,000-workload report, 4 MB)."""
    return orjson.dumps(to_document(report), option=orjson.OPT_INDENT_2).decode() + "\n"


def as_yaml(report: Report) -> str:
    return str(yaml.safe_dump(to_document(report), sort_keys=False, width=120))


CSV_COLUMNS = ("namespace", "kind", "workload", "container", "role", "pool", "replicas", "running_pods",
               "cpu_request_m", "cpu_target_m", "cpu_planned_request_m", "cpu_limit_m", "cpu_planned_limit_m",
               "memory_request_bytes", "memory_target_bytes", "memory_planned_request_bytes", "memory_limit_bytes",
               "memory_planned_limit_bytes", "confidence", "disruption", "disruption_reason", "risks",
               "cost_current_micros", "cost_recommended_micros", "savings_micros", "increases_micros", "reasons")


def _csv_row(w: WorkloadReport, c: ContainerReport, many: bool = False) -> list[object]:
    def v(x: int | None) -> object:
        return "" if x is None else x
    target = _target(c)
    return [*([w.cluster] * many), w.namespace, w.kind, w.name, c.name, c.role.value, w.pool, w.replicas,
            w.running_pods,
            v(c.current.requests.cpu_millicores), v(target.cpu_millicores), v(c.planned.requests.cpu_millicores),
            v(c.current.limits.cpu_millicores), v(c.planned.limits.cpu_millicores),
            v(c.current.requests.memory_bytes), v(target.memory_bytes), v(c.planned.requests.memory_bytes),
            v(c.current.limits.memory_bytes), v(c.planned.limits.memory_bytes),
            "" if c.recommendation is None else round(c.recommendation.confidence, 4), w.disruption.value,
            w.disruption_reason, ";".join(r.risk.value for r in w.risks), c.cost.current, c.cost.recommended,
            c.cost.savings, c.cost.increases, reasons(c)]


def as_csv(report: Report) -> str:
    """One row per container; money in integer micro-units so a spreadsheet sum is exact. Over several
    clusters the first column is the workload's cluster (kube context)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    many = bool(report.clusters)
    writer.writerow(("cluster",) * many + CSV_COLUMNS)
    for w in report.workloads:
        for c in w.containers:
            writer.writerow(_csv_row(w, c, many))
    return out.getvalue()


# ------------------------------------------------------------------------------------------------- markdown
def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_cost_rows(report: Report, groups: Iterable[GroupSummary]) -> list[str]:
    rows = []
    for g in [*groups, report.total]:
        c: Cost = g.cost
        rows.append(f"| {_md(g.name or '(no pool)')} | {g.workloads} | {money(report, c.current)} | "
                    f"{money(report, c.recommended)} | {money(report, c.savings)} | {money(report, c.increases)} | "
                    f"{money(report, c.net, signed=True)} |")
    return rows


def as_markdown(report: Report) -> str:
    lines = ["## podtailor right-sizing report", "", _headline(report) + ".", ""]
    counts: dict[str, int] = {}
    for w in report.workloads:
        counts[w.disruption.value] = counts.get(w.disruption.value, 0) + 1
    lines += ["Disruption if applied: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), ""]
    many = bool(report.clusters)
    lines += ["| " + "cluster | " * many + "workload | container | requests now | recommended | limits planned | "
              "cost now | cost new | disruption | risks | why |", "|" + "---|" * many + "---|---|---|---|---|---:|---:|"
              "---|---|---|"]
    for w in report.workloads:
        for c in w.containers:
            lines.append("| " + f"{_md(w.cluster)} | " * many + f"`{_md(w.namespace)}/{_md(w.kind)}/{_md(w.name)}` | "
                         f"{_md(c.name)} | "
                         f"{pair(c.current.requests)} | {pair(_target(c))} | {pair(c.planned.limits)} | "
                         f"{money(report, c.cost.current)} | {money(report, c.cost.recommended)} | "
                         f"{w.disruption.value} | {_md(_risks(w))} | {_md(reasons(c))} |")
    for title, groups in (("cluster", report.clusters),) * many + (("namespace", report.namespaces),
                                                                    ("node pool", report.pools)):
        lines += ["", f"### By {title}", "", f"| {title} | workloads | current | recommended | savings | "
                  "increases | net |", "|---|---:|---:|---:|---:|---:|---:|", *_md_cost_rows(report, groups)]
    if report.warnings:
        lines += ["", "### Warnings", "", *(f"- {_md(w)}" for w in report.warnings)]
    return "\n".join(lines) + "\n"
