"""Unit tests of podtailor's composed parameters: the flat "part.field" view and overrides, each price mode's
arithmetic, the decrease dwell, and the refusal of bad names, values and parts with nothing built."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from recommender.model.common import GIB
from recommender.model.podtailor_cpu_parts import CpuLimitRule, CpuPrice, CpuPriceMode
from recommender.model.podtailor_memory_parts import MemoryMarginMode, MemoryPrice, MemoryPriceMode, MemoryStatistic
from recommender.model.podtailor_params import (
    DecreaseDwell,
    PodtailorParams,
    ResizeBands,
    parameters_of,
    with_overrides,
)
from recommender.model.registry import get_strategy
from recommender.model.types import FleetScale

FLEET = FleetScale(cpu_cores=0.4, memory_bytes=2 * GIB)


def test_the_flat_view_names_every_setting_once_and_round_trips() -> None:
    flat = parameters_of(PodtailorParams())
    assert json.loads(json.dumps(flat)) == flat  # enums as their strings: reports print it as it is
    assert flat["cpu_price.mode"] == "fleet" and flat["memory.statistic"] == "cost" and flat["risk"] == 1.0
    assert flat["dwell.decrease_s"] == 20 * 3600.0 and flat["resize.down_fraction"] == 0.2
    assert len(flat) == 69  # 68 settings in 12 parts (15 of them the risk budget's), and the risk
    # Every name of the view is one with_overrides takes, and setting each to its own value changes nothing.
    assert with_overrides(PodtailorParams(), flat) == PodtailorParams()
    changed = with_overrides(PodtailorParams(), {"cpu_price.mode": "container", "memory_margin.mode": "fixed",
                                                 "resize.down_fraction": 0.3, "risk": 2.0})
    assert changed.cpu_price.mode is CpuPriceMode.CONTAINER and changed.memory_margin.mode is MemoryMarginMode.FIXED
    assert changed.resize == ResizeBands(down_fraction=0.3) and changed.risk == 2.0
    assert parameters_of(changed)["cpu_price.mode"] == "container"
    assert changed.cpu == PodtailorParams().cpu  # the parts not named are the defaults


def test_a_whole_part_and_enum_members_are_taken_as_they_are() -> None:
    price = CpuPrice(mode=CpuPriceMode.ABSOLUTE, cores=0.5)
    strategy = get_strategy("podtailor", cpu_price=price, **{"memory.statistic": MemoryStatistic.LOW})
    assert strategy.parameters()["cpu_price.cores"] == 0.5 and strategy.parameters()["memory.statistic"] == "low"
    # A part given whole and one of its fields together: the field is set on the part given.
    both = with_overrides(PodtailorParams(), {"cpu_price": price, "cpu_price.cores": 2.0})
    assert both.cpu_price == replace(price, cores=2.0)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"cpu_price.colour": "red"}, r"unknown parameter\(s\) for podtailor: cpu_price\.colour"),
    ({"pricing.mode": "fleet"}, r"unknown parameter\(s\) for podtailor: pricing\.mode"),
    ({"cpu_over_request_cost_cores": 1.0}, "cpu_over_request_cost_cores"),  # the flat names are gone
    ({"cpu_price.mode": "cheapest"}, "cpu_price.mode must be one of fleet, container, absolute, off"),
    ({"memory_price.mode": "off"}, "memory_price.mode must be one of fleet, container, absolute"),
    ({"cpu_limit.rule": "tight"}, "cpu_limit.rule must be one of percentile, proportional, none"),
    ({"cpu_price": MemoryPrice()}, "cpu_price must be a CpuPrice"),
    ({"risk": 0.0}, r"risk must be a number in \[0.05, 20\]"),
    ({"memory_margin.jump_lookback_s": 1800.0}, "at least one slot"),
])
def test_bad_names_and_values_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_strategy("podtailor", **overrides)


def test_each_cpu_price_mode_prices_in_its_own_units() -> None:
    # The container's p95 is 0.3 cores, the fleet's mean p95 0.4: fleet 2.5 x 0.4 = 1.0, container 2 x 0.3 = 0.6,
    # absolute 1 core whatever the sizes, off nothing.
    assert CpuPrice().price(0.3, FLEET) == pytest.approx(1.0)
    assert CpuPrice().price(0.3, None) == pytest.approx(0.6)  # no fleet (the report): the container's price
    assert CpuPrice().price(0.3, FleetScale(cpu_cores=0.0, memory_bytes=GIB)) == pytest.approx(0.6)  # no CPU in it
    assert CpuPrice(mode=CpuPriceMode.CONTAINER).price(0.3, FLEET) == pytest.approx(0.6)
    assert CpuPrice(mode=CpuPriceMode.CONTAINER).price(None, FLEET) == 0.0  # no history yet
    assert CpuPrice(mode=CpuPriceMode.ABSOLUTE).price(0.3, FLEET) == 1.0
    assert CpuPrice(mode=CpuPriceMode.OFF).price(0.3, FLEET) == 0.0


def test_each_memory_price_mode_prices_in_its_own_units() -> None:
    # Own peak 4 GiB, the fleet's mean peak 2 GiB: fleet max(40 x 2, 4 x 4) = 80 GiB-hours; container 24 x 4 = 96;
    # absolute 100. A container 20 times the fleet's mean (40 GiB) pays its floor, 4 x 40 = 160 > 40 x 2.
    assert MemoryPrice().price(4 * GIB, FLEET) == pytest.approx(80 * GIB)
    assert MemoryPrice().price(40 * GIB, FLEET) == pytest.approx(160 * GIB)
    assert MemoryPrice().price(4 * GIB, None) == pytest.approx(96 * GIB)
    assert MemoryPrice(mode=MemoryPriceMode.CONTAINER).price(4 * GIB, FLEET) == pytest.approx(96 * GIB)
    assert MemoryPrice(mode=MemoryPriceMode.ABSOLUTE).price(4 * GIB, FLEET) == pytest.approx(100 * GIB)


def test_a_decrease_waits_less_the_deeper_it_is() -> None:
    # 20 h x (0.2 / drop) ^ 1, at most 20 h: a 20% drop 20 h, 40% 10 h, 80% 5 h; a 10% one (inside the band,
    # never asked in practice) still 20 h; power 0: 20 h whatever the depth.
    dwell = DecreaseDwell()
    assert [dwell.wait_s(r, 0.2) / 3600.0 for r in (0.8, 0.6, 0.2, 0.9)] == pytest.approx([20.0, 10.0, 5.0, 20.0])
    assert DecreaseDwell(power=0.0).wait_s(0.2, 0.2) == 20 * 3600.0
    assert DecreaseDwell(power=2.0).wait_s(0.6, 0.2) == pytest.approx(5 * 3600.0)  # 20 h x (0.2 / 0.4)^2


def test_the_enums_are_their_strings() -> None:
    assert [m.value for m in CpuLimitRule] == ["percentile", "proportional", "none"]
    assert CpuPriceMode("fleet") is CpuPriceMode.FLEET and MemoryStatistic("minimal") is MemoryStatistic.MINIMAL
