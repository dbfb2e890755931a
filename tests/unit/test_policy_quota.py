"""ResourceQuota in the plan: increases admitted while they fit, decreases always, fallbacks only where the
replacement fits, scopes and priority-class selectors as the API server matches them.

Defaults (tests/builders/policy.py): pods of Deployment shop/web (3 replicas), one container ``app`` at cpu 500m,
memory 512 MiB, no limits; the target is cpu 750m (a +250m increase) unless said otherwise.
"""

from __future__ import annotations

from podtailor.resize.types import QoS, Reason
from tests.builders.policy import MI, container, ctarget, node, pod, run, wtarget
from updater.policy.quota import Subject, applies
from updater.policy.types import Action, QuotaView, ScopeRequirement
from updater.rollout.act.executor import actionable


def quota(name: str = "compute", *, hard: int, used: int, key: str = "requests.cpu",
          scopes: tuple[ScopeRequirement, ...] = ()) -> QuotaView:
    return QuotaView(namespace="shop", name=name, hard={key: hard}, used={key: used}, scopes=scopes)


def test_increases_are_admitted_while_they_fit_then_skipped_with_the_quota_named() -> None:
    pods = [pod(f"web-{i}") for i in range(3)]
    # Room 2000 - 1500 = 500m: two +250m increases fit (500m), the third would make 2250m > 2000m.
    result = run(pods, quotas=[quota(hard=2000, used=1500)])
    by_pod = {d.pod: d for d in result.decisions}
    assert [by_pod[f"web-{i}"].action for i in range(3)] == [Action.RESIZE_ONLINE, Action.RESIZE_ONLINE, Action.SKIP]
    held = by_pod["web-2"]
    assert held.reason == Reason.QUOTA
    assert held.message == "resize would exceed ResourceQuota compute: requests.cpu used 2000m + 250m > hard 2000m"
    assert sorted(k for b in result.batches for k in b.pods) == ["shop/web-0", "shop/web-1"]


def test_decreases_always_pass_and_go_first_but_lend_no_room() -> None:
    # web-0 and web-1 grow by 250m, web-2 shrinks (target 250m under its 1000m request). The quota is full:
    # the decrease lands, and frees nothing at admission (the quota controller counts it after the kubelet
    # applied it), so both increases are held.
    pods = [pod("web-0"), pod("web-1"), pod("web-2", workload="small", containers=[container(cpu=1000)])]
    targets = [wtarget(), wtarget(ctarget(cpu=250), workload="small")]
    result = run(pods, targets, quotas=[quota(hard=2000, used=2000)])
    by_pod = {d.pod: d for d in result.decisions}
    assert by_pod["web-2"].action == Action.RESIZE_ONLINE
    assert by_pod["web-0"].reason == by_pod["web-1"].reason == Reason.QUOTA
    assert [d.pod for d in actionable(result)] == ["web-2"]


def test_the_charge_is_against_what_the_kubelet_reports_when_that_is_higher() -> None:
    # The kubelet still runs 700m (an earlier resize not yet actuated down): usage is max(spec 500, 700) = 700,
    # after the resize max(750, 700) = 750, so the charge is 50m, which fits a room of 100m.
    from dataclasses import replace

    from tests.builders.policy import res

    running = replace(container(), actual=res(700, 512 * MI))
    d = run([pod(containers=[running])], quotas=[quota(hard=2000, used=1900)]).decisions[0]
    assert d.action == Action.RESIZE_ONLINE


def test_a_limits_quota_counts_the_new_limits() -> None:
    # Limits keep their 2:1 ratio: 1000m -> ceil(1000 x 750 / 500) = 1500m, a +500m charge on limits.cpu.
    pods = [pod(containers=[container(cpu=500, cpu_lim=1000)])]
    held = run(pods, quotas=[quota(hard=4000, used=3600, key="limits.cpu")]).decisions[0]
    assert held.reason == Reason.QUOTA and "limits.cpu used 3600m + 500m > hard 4000m" in held.message
    fits = run(pods, quotas=[quota(hard=4100, used=3600, key="limits.cpu")]).decisions[0]
    assert fits.action == Action.RESIZE_ONLINE


def test_a_memory_quota_in_bytes() -> None:
    pods = [pod()]
    t = [wtarget(ctarget(cpu=500, mem=768 * MI))]  # +256 MiB
    held = run(pods, t, quotas=[quota(hard=1024 * MI, used=900 * MI, key="requests.memory")]).decisions[0]
    assert held.reason == Reason.QUOTA and "requests.memory used 900Mi + 256Mi > hard 1024Mi" in held.message


def test_a_fallback_is_held_when_its_whole_replacement_does_not_fit() -> None:
    # Target 6000m on a 4-core node: fallback (evict). The replacement is created while the evicted pod still
    # counts, so it needs room for all of it: 6000m. Room 5000m: held; room 6000m: taken.
    t = [wtarget(ctarget(cpu=6000))]
    held = run([pod()], t, quotas=[quota(hard=9000, used=4000)]).decisions[0]
    assert (held.action, held.reason) == (Action.SKIP, Reason.QUOTA)
    assert held.message.startswith("fallback held (above-node-allocatable: ")
    assert held.message.endswith("its replacement would exceed ResourceQuota compute: requests.cpu used 4000m + "
                                 "6000m > hard 9000m")
    taken = run([pod()], t, quotas=[quota(hard=10000, used=4000)]).decisions[0]
    assert (taken.action, taken.reason) == (Action.FALLBACK, Reason.ABOVE_NODE)


def test_quotas_of_other_namespaces_and_other_scopes_do_not_apply() -> None:
    other = QuotaView(namespace="elsewhere", name="q", hard={"cpu": 1}, used={"cpu": 1})
    assert run([pod()], quotas=[other]).decisions[0].action == Action.RESIZE_ONLINE
    best_effort_only = quota(hard=1, used=1, scopes=(ScopeRequirement(scope="BestEffort"),))
    assert run([pod()], quotas=[best_effort_only]).decisions[0].action == Action.RESIZE_ONLINE
    not_best_effort = quota(hard=1, used=1, scopes=(ScopeRequirement(scope="NotBestEffort"),))
    assert run([pod()], quotas=[not_best_effort]).decisions[0].reason == Reason.QUOTA


def test_priority_class_selectors_match_as_the_api_server_does() -> None:
    def sel(op: str, *values: str) -> QuotaView:
        return quota(hard=1, used=1, scopes=(ScopeRequirement(scope="PriorityClass", operator=op,
                                                               values=frozenset(values)),))

    high, plain = Subject(qos=QoS.BURSTABLE, priority_class="high"), Subject(qos=QoS.BURSTABLE)
    assert applies(sel("In", "high", "mid"), high) and not applies(sel("In", "high"), plain)
    assert not applies(sel("NotIn", "high"), high) and applies(sel("NotIn", "high"), plain)  # absent key: NotIn
    assert applies(sel("Exists"), high) and not applies(sel("Exists"), plain)
    assert applies(sel("DoesNotExist"), plain) and not applies(sel("DoesNotExist"), high)
    # In the plan: a quota for priority class "high" holds only the pod of that class.
    pods = [pod("web-0", priority_class="high"), pod("web-1")]
    by_pod = {d.pod: d for d in run(pods, quotas=[sel("In", "high")]).decisions}
    assert by_pod["web-0"].reason == Reason.QUOTA and by_pod["web-1"].action == Action.RESIZE_ONLINE


def test_terminating_scope_follows_active_deadline() -> None:
    terminating = quota(hard=1, used=1, scopes=(ScopeRequirement(scope="Terminating"),))
    assert run([pod(terminating=True)], quotas=[terminating]).decisions[0].reason == Reason.QUOTA
    assert run([pod()], quotas=[terminating]).decisions[0].action == Action.RESIZE_ONLINE


def test_every_matching_quota_must_admit() -> None:
    roomy = quota("roomy", hard=100_000, used=0)
    tight = quota("tight", hard=2000, used=1900, key="cpu")
    held = run([pod()], quotas=[roomy, tight]).decisions[0]
    assert held.reason == Reason.QUOTA and "ResourceQuota tight: cpu used 1900m + 250m > hard 2000m" in held.message


def test_without_quotas_the_plan_is_unchanged() -> None:
    pods = [pod(f"web-{i}") for i in range(3)]
    assert run(pods) == run(pods, quotas=[])
    assert all(d.action == Action.RESIZE_ONLINE for d in run(pods).decisions)


def test_a_quota_on_another_resource_does_not_hold_the_change() -> None:
    # A quota on memory only does not hold a CPU-only change.
    d = run([pod()], nodes=[node()], quotas=[quota(hard=1, used=1, key="limits.memory")]).decisions[0]
    assert d.action == Action.RESIZE_ONLINE


def test_held_decisions_say_what_was_held() -> None:
    held = run([pod()], quotas=[quota(hard=1, used=1)]).decisions[0]
    assert held.held == Action.RESIZE_ONLINE
    fallback = run([pod()], [wtarget(ctarget(cpu=6000))], quotas=[quota(hard=1, used=1)]).decisions[0]
    assert fallback.held == Action.FALLBACK
