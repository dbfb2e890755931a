"""What a container's cgroup must hold for the resources its status reports, and whether it does (pure).

Owns the comparison that takes verification below the pod's status: the kubelet writes a container's CPU
limit as a CFS quota, its CPU request as shares and its memory limit as the memory limit
(``pkg/kubelet/cm/helpers_linux.go``: ``MilliCPUToQuota``, ``MilliCPUToShares``); ``CgroupReading`` is what
the kubelet's cAdvisor series say the cgroup holds (``container_spec_cpu_quota``, ``container_spec_cpu_period``,
``container_spec_cpu_shares``, ``container_spec_memory_limit_bytes``), and ``disagreement`` names the first
field where they differ. A field the reading lacks is not compared (a node serves only what it has).
"""

from __future__ import annotations

from dataclasses import dataclass

from podtailor.resources import Resources
from podtailor.units import format_memory

CPU_PERIOD_US = 100_000
"""The kubelet's CFS period (``cpuCFSQuotaPeriod`` default, 100 ms)."""
MIN_QUOTA_US = 1_000
"""``MinQuotaPeriod`` in helpers_linux.go: a smaller quota is raised to it."""
MIN_SHARES, MAX_SHARES = 2, 262_144
SHARES_TOLERANCE = 27
"""On cgroup v2 the kernel keeps ``cpu.weight`` and cAdvisor converts it back to shares; one weight step is
262142 / 9999 = 26.2 shares (runc ``ConvertCPUSharesToCgroupV2Value``), so shares within 27 agree."""
PAGE_BYTES = 4096
"""The kernel keeps a memory limit in whole pages: a limit within one page of status agrees."""
GRACE_S = 30.0
"""How long status may say "done" while the cgroup still disagrees: the kubelet serves cAdvisor's cached spec,
refreshed every few seconds (housekeeping), so a fresh resize is not a disagreement yet."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupReading:
    """One container's cgroup as the kubelet's cAdvisor series report it; None: no such series."""

    cpu_quota_us: int | None = None
    cpu_period_us: int | None = None
    cpu_shares: int | None = None
    memory_limit_bytes: int | None = None


def quota_us(limit_millicores: int, period_us: int = CPU_PERIOD_US) -> int:
    """``MilliCPUToQuota``: limit x period / 1000, at least ``MIN_QUOTA_US``."""
    return max(MIN_QUOTA_US, limit_millicores * period_us // 1000)


def shares(request_millicores: int | None) -> int:
    """``MilliCPUToShares``: request x 1024 / 1000 within [2, 262144]; no request: 2."""
    if not request_millicores:
        return MIN_SHARES
    return min(MAX_SHARES, max(MIN_SHARES, request_millicores * 1024 // 1000))


def disagreement(requests: Resources, limits: Resources, reading: CgroupReading) -> str:
    """The first field where the cgroup does not hold what ``requests``/``limits`` (the status) say, with both
    values and the cAdvisor series it was read from; empty when they agree."""
    if limits.cpu_millicores is not None and reading.cpu_quota_us is not None:
        want = quota_us(limits.cpu_millicores, reading.cpu_period_us or CPU_PERIOD_US)
        if reading.cpu_quota_us != want:
            return (f"cpu limit: the cgroup's CFS quota is {reading.cpu_quota_us}us, status says "
                    f"{limits.cpu_millicores}m ({want}us) (container_spec_cpu_quota)")
    if reading.cpu_shares is not None and requests.cpu_millicores is not None:
        want = shares(requests.cpu_millicores)
        if abs(reading.cpu_shares - want) > SHARES_TOLERANCE:
            return (f"cpu request: the cgroup's CPU shares are {reading.cpu_shares}, status says "
                    f"{requests.cpu_millicores}m ({want} shares) (container_spec_cpu_shares)")
    if limits.memory_bytes is not None and reading.memory_limit_bytes is not None and \
            abs(reading.memory_limit_bytes - limits.memory_bytes) >= PAGE_BYTES:
        return (f"memory limit: the cgroup's limit is {format_memory(reading.memory_limit_bytes)}, status says "
                f"{format_memory(limits.memory_bytes)} (container_spec_memory_limit_bytes)")
    return ""
