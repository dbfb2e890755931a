"""The price sheet: OpenCost defaults, per-pool overrides from YAML or JSON, exact money, bad files refused."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from podtailor.resources import Resources
from recommender.report.pricing import PriceError, PriceSheet, format_money, load_sheet, monthly_cost

Gi = 2**30


def test_defaults_are_opencosts() -> None:
    sheet = PriceSheet()
    assert sheet.default.cpu_per_vcpu_hour == Fraction(31611, 10**6)
    assert sheet.default.memory_per_gib_hour == Fraction(4237, 10**6)
    assert sheet.hours_per_month == 730
    assert sheet.describe()["cpuPerVcpuHour"] == "0.031611"


def test_monthly_cost_worked_example() -> None:
    # 2 cores x 0.031611 + 4 GiB x 0.004237 = 0.080170 $/h; x 730 h = $58.5241 -> 58,524,100 micros.
    cost = monthly_cost(Resources(cpu_millicores=2000, memory_bytes=4 * Gi), Fraction(730), PriceSheet().default)
    assert cost == 58_524_100
    assert monthly_cost(Resources(), Fraction(730), PriceSheet().default) == 0  # unset requests cost nothing


def test_pool_overrides_from_yaml_and_json(tmp_path: Path) -> None:
    y = tmp_path / "prices.yaml"
    y.write_text('cpuPerVcpuHour: "0.04"\npools:\n  spot: {cpuPerVcpuHour: 0.006655}\n')
    sheet = load_sheet(y)
    assert sheet.default.cpu_per_vcpu_hour == Fraction(4, 100)
    assert sheet.default.memory_per_gib_hour == Fraction(4237, 10**6)  # not given: the default
    assert sheet.for_pool("spot").cpu_per_vcpu_hour == Fraction(6655, 10**6)
    assert sheet.for_pool("spot").memory_per_gib_hour == Fraction(4237, 10**6)  # inherits the file's default
    assert sheet.for_pool("other") == sheet.default
    j = tmp_path / "prices.json"
    j.write_text('{"currency": "EUR", "hoursPerMonth": 720, "memoryPerGibHour": "0.005"}')
    sheet = load_sheet(j)
    assert (sheet.currency, sheet.hours_per_month, sheet.default.memory_per_gib_hour) == ("EUR", 720,
                                                                                           Fraction(5, 1000))


@pytest.mark.parametrize("text, message", [
    ("cpu: 1\n", "unknown key"), ("cpuPerVcpuHour: -1\n", "negative"), ("cpuPerVcpuHour: abc\n", "not a number"),
    ("hoursPerMonth: 0\n", "hoursPerMonth"), ("pools: [a]\n", "pools"), ("- a\n", "mapping"), ("a: [\n", "YAML"),
])
def test_bad_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(PriceError, match=message):
        load_sheet(path)
    with pytest.raises(PriceError, match="cannot read"):
        load_sheet(tmp_path / "missing.yaml")


def test_money_formatting() -> None:
    assert format_money(58_524_100) == "$58.52"
    assert format_money(-1_234_565_000, signed=True) == "-$1,234.56"  # half to even on cents
    assert format_money(6_000, signed=True) == "+$0.01" and format_money(5_000) == "$0.00"
    assert format_money(12_300_000, "EUR") == "12.30 EUR"
