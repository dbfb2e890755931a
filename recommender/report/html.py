"""The report as one self-contained HTML page: inline CSS, inline JavaScript, inline SVG, no network fetches.

Owns ``as_html``. The page has the totals, cost tables and a bar chart by namespace and by node pool, and one
section per workload with its containers and, per container and resource, a chart of the usage distribution
(histogram of the per-step CPU averages or memory peaks, all pods pooled) against the current request and
limit and the recommendation. A few lines of script filter the workloads by text and by disruption; the
page is complete without them. Every text from the cluster is HTML-escaped.
"""

from __future__ import annotations

import html
import json

from podtailor.resize import changes as ch
from recommender.report.document import rfc3339
from recommender.report.render import fmt_cpu, fmt_memory, money, pair, reasons
from recommender.report.types import ContainerReport, Distribution, GroupSummary, Report, WorkloadReport

W, H, PAD = 380, 130, 24
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px} h3{font-size:15px;margin:0}
.muted{color:#667} .cards{display:flex;gap:12px;flex-wrap:wrap;margin:14px 0}
.card{background:#fff;border:1px solid #dde;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px} .save{color:#17803d} .incr{color:#b42318}
table{border-collapse:collapse;background:#fff;margin:6px 0}
td,th{border:1px solid #dde;padding:4px 8px;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.workload{background:#fff;border:1px solid #dde;border-radius:8px;padding:12px;margin:12px 0}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;margin-left:6px;background:#eef}
.d-in-place{background:#dcfce7} .d-in-place-restart{background:#fef3c7} .d-replacement{background:#fee2e2}
.risk{background:#fde68a} .charts{display:flex;gap:16px;flex-wrap:wrap}
.legend span{margin-right:12px} svg text{font:10px system-ui,sans-serif;fill:#445}
#controls{position:sticky;top:0;background:#fafbfc;padding:6px 0;z-index:1}
"""
SCRIPT = """
(function(){
  var q=document.getElementById('filter'), d=document.getElementById('disruption');
  var items=[].slice.call(document.querySelectorAll('section.workload'));
  function apply(){
    var text=q.value.toLowerCase(), want=d.value, shown=0;
    items.forEach(function(s){
      var ok=(!text||s.dataset.search.indexOf(text)>=0)&&(!want||s.dataset.disruption===want);
      s.style.display=ok?'':'none'; if(ok){shown++;}
    });
    document.getElementById('shown').textContent=shown+' of '+items.length+' workloads shown';
  }
  q.addEventListener('input',apply); d.addEventListener('change',apply); apply();
  document.body.setAttribute('data-ready','true');
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _x(value: float, top: float) -> float:
    return PAD + (W - 2 * PAD) * min(max(value / top, 0.0), 1.0)


def _marker(value: int | None, top: float, cls: str, colour: str, label: str, row: int, dash: str = "") -> str:
    if value is None:
        return ""
    x = _x(float(value), top)
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line class="{cls}" x1="{x:.1f}" x2="{x:.1f}" y1="12" y2="{H - PAD}" stroke="{colour}" '
            f'stroke-width="2"{dashed}/>{_label(x, 12 + 11 * row, colour, label)}')


def _label(x: float, y: int, colour: str, label: str) -> str:
    """Right of the line, or left of it in the right half, so the text stays inside the chart."""
    if x > W / 2:
        return f'<text x="{x - 3:.1f}" y="{y}" fill="{colour}" text-anchor="end">{_e(label)}</text>'
    return f'<text x="{x + 3:.1f}" y="{y}" fill="{colour}">{_e(label)}</text>'


def chart(c: ContainerReport, resource: str, dist: Distribution | None) -> str:
    """An inline SVG: the histogram of usage and the request, limit and recommendation lines."""
    fmt = fmt_cpu if resource == "cpu" else fmt_memory
    title = f"{c.name} {'CPU' if resource == 'cpu' else 'memory'}"
    if dist is None:
        return (f'<svg class="chart chart-{resource} chart-empty" width="{W}" height="40" role="img" '
                f'aria-label="{_e(title)}: no usage history"><text x="4" y="24">{_e(title)}: no usage history</text>'
                "</svg>")
    peak = max(dist.counts) or 1
    bin_w = (W - 2 * PAD) / len(dist.counts)
    bars = "".join(
        f'<rect class="bar" x="{PAD + i * bin_w:.1f}" y="{H - PAD - (H - PAD - 36) * n / peak:.1f}" '
        f'width="{max(bin_w - 1, 1):.1f}" height="{(H - PAD - 36) * n / peak:.1f}" fill="#94a3b8"/>'
        for i, n in enumerate(dist.counts) if n)
    rec = c.recommendation
    marks = [_marker(ch.get(c.current.requests, resource), dist.top, "mark-request", "#2563eb",
                     f"request {fmt(ch.get(c.current.requests, resource))}", 1),
             _marker(ch.get(c.current.limits, resource), dist.top, "mark-limit", "#dc2626",
                     f"limit {fmt(ch.get(c.current.limits, resource))}", 2, "4 3")]
    if rec is not None:
        marks.append(_marker(ch.get(rec.target, resource), dist.top, "mark-recommended", "#16a34a",
                             f"recommended {fmt(ch.get(rec.target, resource))}", 3))
    axis = (f'<line x1="{PAD}" x2="{W - PAD}" y1="{H - PAD}" y2="{H - PAD}" stroke="#667"/>'
            f'<text x="{PAD}" y="{H - 8}">0</text><text x="{W - PAD}" y="{H - 8}" text-anchor="end">'
            f'{_e(fmt(int(dist.top)))}</text><text x="{W / 2:.0f}" y="{H - 8}" text-anchor="middle">'
            f'{_e(title)}, p95 {_e(fmt(int(dist.p95)))}, max {_e(fmt(int(dist.max)))}</text>')
    return (f'<svg class="chart chart-{resource}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="{_e(title)} usage distribution">{bars}{axis}{"".join(marks)}</svg>')


def _container_rows(report: Report, w: WorkloadReport) -> str:
    rows = []
    for c in w.containers:
        rec = c.recommendation
        rows.append(f"<tr><td>{_e(c.name)}</td><td>{_e(c.role.value)}</td><td>{_e(pair(c.current.requests))}</td>"
                    f"<td>{_e(pair(rec.target) if rec else '-')}</td><td>{_e(pair(c.current.limits))}</td>"
                    f"<td>{_e(pair(c.planned.limits))}</td><td>{_e(f'{rec.confidence:.2f}' if rec else '-')}</td>"
                    f"<td class=num>{_e(money(report, c.cost.current))}</td>"
                    f"<td class=num>{_e(money(report, c.cost.recommended))}</td>"
                    f"<td class=why>{_e(reasons(c))}</td></tr>")
    return "".join(rows)


def workload_section(report: Report, w: WorkloadReport) -> str:
    risks = "".join(f'<span class="badge risk" title="{_e(r.message)}">{_e(r.risk.value)}</span>' for r in w.risks)
    search = f"{w.cluster} {w.namespace} {w.kind} {w.name} {w.pool}".lower().lstrip()
    charts = "".join(chart(c, res, c.usage.cpu_millicores if res == "cpu" else c.usage.memory_bytes)
                     if c.usage else chart(c, res, None) for c in w.containers for res in ("cpu", "memory"))
    return (f'<section class="workload" data-search="{_e(search)}" data-disruption="{_e(w.disruption.value)}">'
            f'<h3>{_e(f"{w.cluster}: " if w.cluster else "")}{_e(w.namespace)} / {_e(w.kind)} / {_e(w.name)}'
            f'<span class="badge d-{_e(w.disruption.value)}" title="{_e(w.disruption_message)}">'
            f'{_e(w.disruption.value)}</span>{risks}</h3>'
            f'<div class="muted">pool {_e(w.pool or "-")}, {w.running_pods} running of {w.replicas} replicas, '
            f'QoS {_e(w.qos_current)} -> {_e(w.qos_planned)}; {_e(w.disruption_message)}; monthly '
            f'{_e(money(report, w.cost.current))} -> {_e(money(report, w.cost.recommended))}</div>'
            "<table><tr><th>container</th><th>role</th><th>requests now</th><th>recommended</th><th>limits now</th>"
            "<th>limits planned</th><th>confidence</th><th>cost now</th><th>cost new</th><th>why</th></tr>"
            f'{_container_rows(report, w)}</table><div class="charts">{charts}</div></section>')


def bar_chart(report: Report, groups: tuple[GroupSummary, ...], cls: str) -> str:
    """Current (grey) and recommended (green) monthly cost per group, horizontal bars."""
    top = max((max(g.cost.current, g.cost.recommended) for g in groups), default=0) or 1
    row, label_w, width = 26, 160, 640
    parts = []
    for i, g in enumerate(groups):
        y = 8 + i * row
        cur = (width - label_w - 110) * g.cost.current / top
        new = (width - label_w - 110) * g.cost.recommended / top
        parts.append(f'<text x="0" y="{y + 12}">{_e(g.name or "(no pool)")}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{cur:.1f}" height="9" fill="#94a3b8"/>'
                     f'<rect x="{label_w}" y="{y + 10}" width="{new:.1f}" height="9" fill="#16a34a"/>'
                     f'<text x="{label_w + max(cur, new) + 6:.1f}" y="{y + 14}">'
                     f'{_e(money(report, g.cost.net, signed=True))}</text>')
    return (f'<svg class="summary-chart {cls}" width="{width}" height="{len(groups) * row + 12}" role="img" '
            f'aria-label="monthly cost by {cls}">{"".join(parts)}</svg>')


def _group_table(report: Report, title: str, groups: tuple[GroupSummary, ...]) -> str:
    rows = "".join(f"<tr><td>{_e(g.name or '(no pool)')}</td><td class=num>{g.workloads}</td>"
                   f"<td class=num>{_e(money(report, g.cost.current))}</td>"
                   f"<td class=num>{_e(money(report, g.cost.recommended))}</td>"
                   f"<td class='num save'>{_e(money(report, g.cost.savings))}</td>"
                   f"<td class='num incr'>{_e(money(report, g.cost.increases))}</td></tr>" for g in groups)
    return (f"<table><tr><th>{_e(title)}</th><th>workloads</th><th>current</th><th>recommended</th><th>savings</th>"
            f"<th>increases</th></tr>{rows}</table>")


def as_html(report: Report) -> str:
    t = report.total.cost
    cards = "".join(f'<div class="card {cls}">{_e(label)}<b>{_e(value)}</b></div>' for label, value, cls in (
        ("Current / month", money(report, t.current), ""), ("Recommended / month", money(report, t.recommended), ""),
        ("Savings", money(report, t.savings), "save"), ("Increases", money(report, t.increases), "incr"),
        ("Workloads", str(report.total.workloads), "")))
    options = "".join(f'<option value="{v}">{v}</option>' for v in
                      ("in-place", "in-place-restart", "replacement", "none", "left-alone"))
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings)
    data = json.dumps({"workloads": report.total.workloads, "strategy": report.strategy}).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>podtailor report {_e(rfc3339(report.generated_s))}</title><style>{CSS}</style></head><body>"
        f"<h1>podtailor right-sizing report</h1><div class=muted>strategy {_e(report.strategy)}; history "
        f"{_e(rfc3339(report.start_s))} .. {_e(rfc3339(report.end_s))}; prices: {_e(report.prices.get('source'))}"
        f"</div><div class=cards>{cards}</div>"
        + (f"<h2>By cluster</h2>{bar_chart(report, report.clusters, 'cluster')}"
           f"{_group_table(report, 'cluster', report.clusters)}" if report.clusters else "")
        +         f"<h2>By namespace</h2>{bar_chart(report, report.namespaces, 'namespace')}"
        f"{_group_table(report, 'namespace', report.namespaces)}"
        f"<h2>By node pool</h2>{bar_chart(report, report.pools, 'pool')}"
        f"{_group_table(report, 'node pool', report.pools)}"
        + (f"<h2>Warnings</h2><ul>{warnings}</ul>" if warnings else "")
        + '<h2>Workloads</h2><div id=controls><input id=filter placeholder="filter by namespace, kind, name, pool"> '
        f'<select id=disruption><option value="">any disruption</option>{options}</select> '
        '<span id=shown class=muted></span></div><div class="legend muted"><span style="color:#2563eb">| request'
        '</span><span style="color:#dc2626">| limit</span><span style="color:#16a34a">| recommended</span>'
        "<span>bars: usage samples</span></div>"
        + "".join(workload_section(report, w) for w in report.workloads)
        + f'<script type="application/json" id="report-data">{data}</script><script>{SCRIPT}</script></body></html>\n')
