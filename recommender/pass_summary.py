"""Printing what one recommender pass did: a terminal table or JSON on stdout.

Owns the human- and machine-readable summary of ``PassReport`` for ``podtailor-recommender once``: the table
shows quantities as a person reads them (``podtailor.resources.human``: "574m / 1.2Gi"), the JSON carries the
exact quantities written into the VPA status.
"""

from __future__ import annotations

import json
import sys

from rich.table import Table

from podtailor.resources import human, quantities
from podtailor.runtime.cli import console
from recommender.engine import PassReport


def print_pass(report: PassReport, output: str) -> None:
    if output == "json":
        rows = [{"namespace": ns, "vpa": vpa, "container": c, "target": quantities(r.target),
                 "lowerBound": quantities(r.lower_bound), "upperBound": quantities(r.upper_bound),
                 "uncappedTarget": quantities(r.uncapped_target), "confidence": round(r.confidence, 3),
                 "reasons": list(r.reasons)} for (ns, vpa, c), r in sorted(report.recommendations.items())]
        json.dump({"schemaVersion": "podtailor.io/pass/v1", "served": report.served, "written": report.written,
                   "stale": report.stale, "unsupported": report.unsupported, "recommendations": rows},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title=f"{report.served} VPAs served, {report.written} written, {report.stale} stale, "
                        f"{report.unsupported} unsupported")
    for col in ("namespace", "VPA", "container", "target cpu / mem", "lower", "upper", "confidence", "notes"):
        table.add_column(col)
    for (ns, vpa, c), r in sorted(report.recommendations.items()):
        table.add_row(ns, vpa, c, human(r.target), human(r.lower_bound), human(r.upper_bound), f"{r.confidence:.2f}",
                      "; ".join(r.reasons))
    console().print(table)
