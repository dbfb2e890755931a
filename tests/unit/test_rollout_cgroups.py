"""Verification down to the cgroup: the comparison, the cAdvisor page, the state machine's judgement, the port.

Pure tests with a fixed time anchor (``tests/builders/rollout.py``). Expected cgroup values are worked from the
kubelet's conversions (``pkg/kubelet/cm/helpers_linux.go``) in the comments.
"""

from __future__ import annotations

from dataclasses import replace

from podtailor.resources import Resources
from tests.builders.rollout import NEW, NOW, entry, obs, rollout
from updater.cgroups import GRACE_S, CgroupReading, disagreement, quota_us, shares
from updater.kube.cadvisor import CgroupCheck, parse_cadvisor, verifying
from updater.observe import PodObservation
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import BatchPhase, Entry, EntryState, Phase, Rollout

Mi = 2**20
CID = "a" * 64


def test_the_kubelets_conversions() -> None:
    # 1500m x 100000 / 1000 = 150000 us; 1m would be 100 us, raised to the 1000 us minimum.
    assert quota_us(1500) == 150_000 and quota_us(1) == 1_000
    # 800m x 1024 / 1000 = 819.2 -> 819; 1m -> 1.024 -> 1, raised to 2; no request -> 2.
    assert (shares(800), shares(1), shares(None)) == (819, 2, 2)


def test_the_first_field_that_disagrees_is_named_with_both_values() -> None:
    req, lim = Resources(cpu_millicores=800, memory_bytes=64 * Mi), Resources(cpu_millicores=1500,
                                                                              memory_bytes=128 * Mi)
    agree = CgroupReading(cpu_quota_us=150_000, cpu_period_us=100_000, cpu_shares=819,
                          memory_limit_bytes=128 * Mi)
    assert disagreement(req, lim, agree) == ""
    old_quota = replace(agree, cpu_quota_us=100_000)
    assert disagreement(req, lim, old_quota).startswith("cpu limit: the cgroup's CFS quota is 100000us, "
                                                        "status says 1500m (150000us)")
    # cgroup v2 keeps cpu.weight; shares read back within one weight step (26.2 shares) agree.
    assert disagreement(req, lim, replace(agree, cpu_shares=819 + 26)) == ""
    assert "cpu request" in disagreement(req, lim, replace(agree, cpu_shares=512))
    assert "memory limit" in disagreement(req, lim, replace(agree, memory_limit_bytes=256 * Mi))
    # A field the node does not serve is not compared.
    assert disagreement(req, lim, CgroupReading(memory_limit_bytes=128 * Mi)) == ""


PAGE = f"""# HELP container_spec_cpu_quota CPU quota of the container.
# TYPE container_spec_cpu_quota gauge
container_spec_cpu_quota{{container="",id="/podtailor/x/kubepods/burstable/pod1/{CID}",namespace="",pod=""}} 150000
container_spec_cpu_quota{{container="",id="/podtailor/x/kubepods/burstable/pod1",namespace="ns",pod="p"}} 150000
# HELP container_spec_cpu_shares CPU share of the container.
# TYPE container_spec_cpu_shares gauge
container_spec_cpu_shares{{id="/kubepods.slice/cri-containerd-{"b" * 64}.scope"}} 512
# HELP container_spec_memory_limit_bytes Memory limit for the container.
# TYPE container_spec_memory_limit_bytes gauge
container_spec_memory_limit_bytes{{id="/podtailor/x/kubepods/burstable/pod1/{CID}"}} 1.34217728e+08
# HELP container_memory_usage_bytes Current memory usage in bytes.
# TYPE container_memory_usage_bytes gauge
container_memory_usage_bytes{{id="/podtailor/x/kubepods/burstable/pod1/{CID}"}} 1e+07
"""


def test_the_cadvisor_page_is_read_by_container_id_from_the_cgroup_path() -> None:
    page = parse_cadvisor(PAGE)
    # The pod-level cgroup has no container ID and is left out; the systemd driver's scope name is understood.
    assert page == {CID: CgroupReading(cpu_quota_us=150_000, memory_limit_bytes=128 * Mi),
                    "b" * 64: CgroupReading(cpu_shares=512)}
    assert parse_cadvisor("# a hollow node: no container_spec series\nup 1\n") == {}
    # A NaN or infinite sample (a broken exporter) says nothing about the cgroup: that field is not compared.
    broken = PAGE.replace("} 512", "} NaN").replace("} 1.34217728e+08", "} +Inf")
    assert parse_cadvisor(broken) == {CID: CgroupReading(cpu_quota_us=150_000)}


def _verifying(*entries: Entry) -> Rollout:
    r = rollout(*entries, batches=1, bake_s=60)
    return replace(r, batches=(replace(r.batches[0], phase=BatchPhase.VERIFYING, deadline_s=NOW + 600),))


def _done(disagrees: str = "", for_s: float = 0.0) -> PodObservation:
    o = obs("a", NEW, NEW, generation=2, observed=2)
    return replace(o, cgroup_disagreement=disagrees, cgroup_disagreement_s=for_s)


def test_status_done_but_the_cgroup_disagrees_waits_then_fails_the_batch_and_leaves_the_pod() -> None:
    r = _verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW),
                   entry("b", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    why = "container app: cpu limit: the cgroup's CFS quota is 100000us, status says 1000m (100000us)"
    b_done = replace(obs("b", NEW, NEW, generation=2, observed=2))
    # Within the grace period: not verified yet, nothing failed.
    r2, effects = machine.advance(r, {"ns/a": _done(why, GRACE_S - 1), "ns/b": b_done}, NOW + 5)
    assert r2.entries[0].state == EntryState.APPLIED and r2.phase == Phase.PROGRESSING
    assert not [e for e in effects if isinstance(e, machine.Event) and e.warning]
    # Past it: the batch fails and the pool rolls back; the pod itself is Skipped (no further patch to it).
    r3, effects = machine.advance(r2, {"ns/a": _done(why, GRACE_S + 1), "ns/b": b_done}, NOW + 40)
    assert r3.phase == Phase.ROLLING_BACK and "cgroup disagrees" in r3.message and "CFS quota" in r3.message
    assert r3.entries[0].state == EntryState.SKIPPED and "no further patch" in r3.entries[0].message
    [event] = [e for e in effects if isinstance(e, machine.Event) and e.pod == "a"]
    assert (event.reason, event.warning) == ("CgroupMismatch", True) and "cpu limit" in event.message
    _, effects = machine.advance(r3, {"ns/a": _done(why, GRACE_S + 2), "ns/b": b_done}, NOW + 41)
    assert [z.key for z in effects if isinstance(z, machine.Resize)] == ["ns/b"]  # only b is restored
    # Agreeing cgroups: verified as before.
    r5, _ = machine.advance(r, {"ns/a": _done(), "ns/b": b_done}, NOW + 5)
    assert r5.entries[0].state == EntryState.VERIFIED and r5.phase == Phase.BAKING


def test_the_port_judges_only_pods_being_verified_and_remembers_since_when() -> None:
    r = _verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    assert verifying([r]) == {"ns/a"}
    a = obs("a", NEW, NEW, generation=2, observed=2)
    a = replace(a, containers={"app": replace(a.containers["app"], container_id=CID)})
    stale = CgroupReading(cpu_shares=512)  # NEW's request is 250m: 256 shares
    calls: list[str] = []

    def read(node: str) -> dict[str, CgroupReading]:
        calls.append(node)
        return {CID: stale}

    check = CgroupCheck(read)
    first = check._judged(a, read("n1"), NOW)
    later = check._judged(a, read("n1"), NOW + 12)
    assert "cpu request" in first.cgroup_disagreement and first.cgroup_disagreement_s == 0
    assert later.cgroup_disagreement_s == 12
    fixed = check._judged(a, {CID: CgroupReading(cpu_shares=256)}, NOW + 13)
    assert fixed.cgroup_disagreement == "" and check.since == {}
