"""The install manifests under manifests/, parsed: every YAML document, the base's objects, and who is granted
what (``grants``). Read by tests/unit/test_manifests_static.py and test_manifests_quota_rbac.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
BASE = MANIFESTS / "base"
NS = "podtailor-system"
Obj = dict[str, Any]


def yaml_files() -> list[Path]:
    # The Helm chart's templates are Go templates, not YAML; tests/integration/test_helm_chart.py renders
    # the chart and checks it equals the kustomize base, which these tests check.
    return sorted(p for p in MANIFESTS.rglob("*") if p.suffix in (".yaml", ".yml")
                  and not p.is_relative_to(MANIFESTS / "helm"))


def documents() -> list[tuple[Path, Obj]]:
    return [(p, d) for p in yaml_files() for d in yaml.safe_load_all(p.read_text()) if d is not None]


DOCS = documents()
OBJECTS = [(p, d) for p, d in DOCS if d["kind"] not in ("Kustomization", "Component")]
BASE_OBJECTS = [d for p, d in OBJECTS if p.is_relative_to(BASE)]


def of_kind(kind: str, objs: list[Obj] = BASE_OBJECTS) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one(kind: str, name: str) -> Obj:
    [obj] = [o for o in BASE_OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def rules_of(sa: str) -> Iterator[tuple[str, Obj]]:
    """(namespace or "" for cluster-wide, rule) for every rule bound to the ServiceAccount in the base."""
    for b in of_kind("ClusterRoleBinding") + of_kind("RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NS for s in b["subjects"]):
            continue
        role = one(b["roleRef"]["kind"], b["roleRef"]["name"])
        scope = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
        for rule in role["rules"]:
            yield scope, rule


def grants(sa: str, verb: str, group: str, resource: str, namespace: str = "default", name: str = "") -> bool:
    for scope, rule in rules_of(sa):
        if scope and scope != namespace:
            continue
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            names = rule.get("resourceNames")
            if not names or name in names:
                return True
    return False
