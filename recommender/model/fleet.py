"""The fleet as summable parts: ``FleetSums`` (per resource, the exact sum of the containers' sizes and their count).

Owns how a ``FleetScale`` (the mean over a fleet's containers of their CPU p95 and largest memory peak) is
built from parts, so that any split of the fleet (namespaces, shards held by different replicas) combines into
the same fleet: ``combine(parts).scale()``. Sums are exact (``fractions.Fraction``; every finite double is a
whole multiple of 2**-1074), so the combination does not depend on the order or grouping of the parts, and the
mean is the correctly rounded quotient: a fleet split across three replicas gives the bit-identical
``FleetScale`` one process gives. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from recommender.model.types import FleetScale

_ULP_BITS = 1074
"""2**-1074 is the smallest positive double: every finite double is a whole multiple of it."""


def exact_sum(values: Iterable[float]) -> Fraction:
    """The exact sum of finite ``values`` (no rounding at all, unlike ``sum`` or ``math.fsum``'s result)."""
    total = 0
    for v in values:
        n, d = float(v).as_integer_ratio()  # d is a power of two, at most 2**1074
        total += n << (_ULP_BITS - (d.bit_length() - 1))
    return Fraction(total, 1 << _ULP_BITS)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSums:
    """One part of a fleet: per resource, the exact sum of its containers' sizes and how many containers have
    one (a container without CPU history but with memory counts for memory only, as in ``FleetScale``)."""

    cpu_cores_sum: Fraction
    """Sum of the containers' CPU p95, in cores."""
    cpu_count: int
    memory_bytes_sum: Fraction
    """Sum of the containers' largest memory peak, in bytes."""
    memory_count: int
    cpu_margin_sum: Fraction = Fraction(0)
    """Sum of the risk budget's CPU log-margins of the containers that have one (podtailor's ``RiskBudget``)."""
    cpu_margin_count: int = 0
    memory_margin_sum: Fraction = Fraction(0)
    """The same for the memory log-margins."""
    memory_margin_count: int = 0
    memory_excess_sum: Fraction = Fraction(0)
    """Sum of OOM kills beyond their budget (``BudgetState.memory_excess``; may be negative) of the containers
    with a memory margin whose target neither the pod's floor nor minAllowed holds (``PodtailorStrategy.fleet_sums``),
    counted by ``memory_excess_count``."""
    memory_excess_count: int = 0

    def __post_init__(self) -> None:
        for total, count, name in ((self.cpu_cores_sum, self.cpu_count, "cpu"),
                                   (self.memory_bytes_sum, self.memory_count, "memory")):
            if count < 0 or total < 0:
                raise ValueError(f"FleetSums: {name} sum and count must be >= 0, got {total} and {count}")
            if count == 0 and total != 0:
                raise ValueError(f"FleetSums: a {name} sum of {total} over no containers")
        for total, count, name in ((self.cpu_margin_sum, self.cpu_margin_count, "cpu margin"),
                                   (self.memory_margin_sum, self.memory_margin_count, "memory margin")):
            if count < 0 or (count == 0 and total != 0):  # a log-margin may be negative
                raise ValueError(f"FleetSums: a {name} sum of {total} over {count} containers")
        if self.memory_excess_count < 0 or (self.memory_excess_count == 0 and self.memory_excess_sum != 0):
            raise ValueError(f"FleetSums: a memory excess sum of {self.memory_excess_sum} over "
                             f"{self.memory_excess_count} containers")

    @staticmethod
    def zero() -> FleetSums:
        return FleetSums(cpu_cores_sum=Fraction(0), cpu_count=0, memory_bytes_sum=Fraction(0), memory_count=0)

    @staticmethod
    def of(cpu_cores: Iterable[float], memory_bytes: Iterable[float], *, cpu_log_margins: Iterable[float] = (),
           memory_log_margins: Iterable[float] = (), memory_excess: Iterable[float] = ()) -> FleetSums:
        """The part made of these per-container sizes (and risk-budget log-margins), the finite ones of each;
        ``memory_excess`` (OOM kills beyond the budget, of the containers it counts) is summed as it is."""
        cpu, memory, cpu_m, memory_m = ([v for v in values if math.isfinite(v)] for values in
                                        (cpu_cores, memory_bytes, cpu_log_margins, memory_log_margins))
        excess = list(memory_excess)
        if not all(math.isfinite(v) for v in excess):
            raise ValueError("FleetSums.of: memory_excess must be finite")
        return FleetSums(cpu_cores_sum=exact_sum(cpu), cpu_count=len(cpu), memory_bytes_sum=exact_sum(memory),
                         memory_count=len(memory), cpu_margin_sum=exact_sum(cpu_m), cpu_margin_count=len(cpu_m),
                         memory_margin_sum=exact_sum(memory_m), memory_margin_count=len(memory_m),
                         memory_excess_sum=exact_sum(excess), memory_excess_count=len(excess))

    def __add__(self, other: FleetSums) -> FleetSums:
        return FleetSums(cpu_cores_sum=self.cpu_cores_sum + other.cpu_cores_sum,
                         cpu_count=self.cpu_count + other.cpu_count,
                         memory_bytes_sum=self.memory_bytes_sum + other.memory_bytes_sum,
                         memory_count=self.memory_count + other.memory_count,
                         cpu_margin_sum=self.cpu_margin_sum + other.cpu_margin_sum,
                         cpu_margin_count=self.cpu_margin_count + other.cpu_margin_count,
                         memory_margin_sum=self.memory_margin_sum + other.memory_margin_sum,
                         memory_margin_count=self.memory_margin_count + other.memory_margin_count,
                         memory_excess_sum=self.memory_excess_sum + other.memory_excess_sum,
                         memory_excess_count=self.memory_excess_count + other.memory_excess_count)

    def scale(self) -> FleetScale | None:
        """The fleet's means (0 for a resource no container has; the margins' None where none has one); None
        when no container has either size."""
        if not self.cpu_count and not self.memory_count:
            return None
        return FleetScale(
            cpu_cores=float(self.cpu_cores_sum / self.cpu_count) if self.cpu_count else 0.0,
            memory_bytes=float(self.memory_bytes_sum / self.memory_count) if self.memory_count else 0.0,
            cpu_log_margin=float(self.cpu_margin_sum / self.cpu_margin_count) if self.cpu_margin_count else None,
            memory_log_margin=(float(self.memory_margin_sum / self.memory_margin_count)
                               if self.memory_margin_count else None),
            memory_excess=(float(self.memory_excess_sum / self.memory_excess_count)
                           if self.memory_excess_count else None))


def combine(parts: Iterable[FleetSums]) -> FleetSums:
    """The fleet made of ``parts`` (of disjoint sets of containers): their sums and counts added."""
    total = FleetSums.zero()
    for part in parts:
        total = total + part
    return total
