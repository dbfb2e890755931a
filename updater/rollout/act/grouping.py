"""Which pods each ResizePolicy governs: the snapshot's pods grouped by the policy selected for them.

Owns the rule that joins policies and pods. A policy object that does not parse stops the whole pass
(``PolicyError``): we cannot know what its author meant to allow, so nothing is acted on until it is fixed.
Pods a policy does not cover stay in its group; the planner marks them not covered, so ``plan`` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence

from updater.kube.policy_crd import PolicyError, parse_policy, select_policy
from updater.policy.types import PodView, RolloutPolicy
from updater.rollout.act.ports import PassSnapshot


def group_by_policy(snap: PassSnapshot) -> list[tuple[RolloutPolicy, Sequence[PodView]]]:
    errors = list(snap.policy_errors)
    if errors:
        raise PolicyError(f"{len(errors)} ResizePolicy object(s) cannot be read, so nothing is acted on until "
                          f"they are fixed: {'; '.join(str(e) for e in errors)[:1000]}")
    policies = [p if isinstance(p, RolloutPolicy) else parse_policy(p) for p in snap.policies]
    groups: dict[str, tuple[RolloutPolicy, list[PodView]]] = {}
    for pod in snap.pods:
        policy = select_policy(policies, pod.namespace)
        groups.setdefault(policy.name, (policy, []))[1].append(pod)
    if not groups:
        default = select_policy(policies, "")
        return [(default, [])]
    return [(policy, pods) for policy, pods in groups.values()]
