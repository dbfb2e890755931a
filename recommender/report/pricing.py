"""The price sheet of the cost review: per-vCPU-hour and per-GiB-hour prices, per node pool, in exact arithmetic.

Owns ``PriceSheet`` (defaults, per-pool overrides read from a YAML or JSON file) and ``monthly_cost``, which
prices requests for a number of pod-hours and rounds once, half to even, to integer micro-units. Prices are
kept as exact fractions of their decimal text, so "0.031611" is 31611/1000000 and not a binary float.

Defaults are OpenCost's: ``configs/default.json`` of opencost/opencost ("Default prices based on GCP
us-central1"): ``"CPU": "0.031611"`` per vCPU-hour and ``"RAM": "0.004237"`` per GiB-hour, checked at
https://github.com/opencost/opencost/blob/0d1f69cc975b293bfc8e4d26e71880c8bddb8895/configs/default.json.
A month is 730 hours (8,760 hours a year / 12, the convention OpenCost's cost model uses too).

File format (YAML or JSON; every key optional)::

    currency: USD
    hoursPerMonth: 730
    cpuPerVcpuHour: "0.031611"
    memoryPerGibHour: "0.004237"
    pools:
      spot: {cpuPerVcpuHour: "0.006655", memoryPerGibHour: "0.000892"}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from podtailor.numeric import is_int, is_number
from podtailor.resources import Resources

DEFAULT_CPU_PER_VCPU_HOUR = "0.031611"
DEFAULT_MEMORY_PER_GIB_HOUR = "0.004237"
DEFAULT_HOURS_PER_MONTH = 730
DEFAULT_SOURCE = "OpenCost default prices (opencost/opencost configs/default.json, GCP us-central1)"
MICROS = 1_000_000
GIB = 2**30


class PriceError(ValueError):
    """A price file that cannot be used (the CLI reports it as bad input, exit code 2)."""


def _price(value: object, where: str) -> Fraction:
    if not (is_number(value) or isinstance(value, str)):
        raise PriceError(f"{where}: expected a number, got {value!r}")
    try:
        price = Fraction(str(value))
    except (ValueError, ZeroDivisionError) as err:
        raise PriceError(f"{where}: not a number: {value!r}") from err
    if price < 0:
        raise PriceError(f"{where}: must not be negative")
    return price


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    cpu_per_vcpu_hour: Fraction
    memory_per_gib_hour: Fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceSheet:
    default: Prices = field(default_factory=lambda: Prices(cpu_per_vcpu_hour=Fraction(DEFAULT_CPU_PER_VCPU_HOUR),
                                                           memory_per_gib_hour=Fraction(DEFAULT_MEMORY_PER_GIB_HOUR)))
    pools: Mapping[str, Prices] = field(default_factory=dict)
    hours_per_month: int = DEFAULT_HOURS_PER_MONTH
    currency: str = "USD"
    source: str = DEFAULT_SOURCE

    def for_pool(self, pool: str) -> Prices:
        return self.pools.get(pool, self.default)

    def describe(self) -> dict[str, Any]:
        """The sheet as the report's ``prices`` object (decimal strings, exact)."""
        def one(p: Prices) -> dict[str, str]:
            return {"cpuPerVcpuHour": _decimal(p.cpu_per_vcpu_hour),
                    "memoryPerGibHour": _decimal(p.memory_per_gib_hour)}
        return {"currency": self.currency, "hoursPerMonth": self.hours_per_month, "source": self.source,
                **one(self.default), "pools": {name: one(p) for name, p in sorted(self.pools.items())}}


def _decimal(value: Fraction) -> str:
    """Exact decimal text of a price read from decimal text (up to 12 places; more is rounded)."""
    scaled = round(value * 10**12)
    whole, frac = divmod(scaled, 10**12)
    text = f"{whole}.{frac:012d}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _prices(raw: Mapping[str, Any], base: Prices, where: str) -> Prices:
    unknown = set(raw) - {"cpuPerVcpuHour", "memoryPerGibHour"}
    if unknown:
        raise PriceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    cpu = _price(raw["cpuPerVcpuHour"], f"{where}.cpuPerVcpuHour") if "cpuPerVcpuHour" in raw \
        else base.cpu_per_vcpu_hour
    memory = _price(raw["memoryPerGibHour"], f"{where}.memoryPerGibHour") if "memoryPerGibHour" in raw \
        else base.memory_per_gib_hour
    return Prices(cpu_per_vcpu_hour=cpu, memory_per_gib_hour=memory)


def parse_sheet(raw: object, source: str) -> PriceSheet:
    if not isinstance(raw, dict):
        raise PriceError(f"{source}: expected a mapping at the top")
    unknown = set(raw) - {"currency", "hoursPerMonth", "cpuPerVcpuHour", "memoryPerGibHour", "pools"}
    if unknown:
        raise PriceError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}")
    base = PriceSheet()
    default = _prices({k: raw[k] for k in ("cpuPerVcpuHour", "memoryPerGibHour") if k in raw}, base.default, source)
    pools_raw = raw.get("pools") or {}
    if not isinstance(pools_raw, dict):
        raise PriceError(f"{source}: pools must be a mapping of pool name to prices")
    pools = {}
    for name, body in pools_raw.items():
        if not isinstance(body, dict):
            raise PriceError(f"{source}: pools.{name} must be a mapping")
        pools[str(name)] = _prices(body, default, f"{source}: pools.{name}")
    hours = raw.get("hoursPerMonth", DEFAULT_HOURS_PER_MONTH)
    if not is_int(hours) or not 1 <= hours <= 744:
        raise PriceError(f"{source}: hoursPerMonth must be a whole number in [1, 744]")
    currency = raw.get("currency", "USD")
    if not isinstance(currency, str) or not currency.isalpha() or len(currency) > 8:
        raise PriceError(f"{source}: currency must be a short code such as USD")
    return PriceSheet(default=default, pools=pools, hours_per_month=hours, currency=currency,
                      source=f"price file {source}")


def load_sheet(path: Path) -> PriceSheet:
    try:
        text = path.read_text()
    except OSError as err:
        raise PriceError(f"cannot read price file {path}: {err}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise PriceError(f"price file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{err}") from None
    return parse_sheet(raw, str(path))


def monthly_cost(requests: Resources, pod_hours: Fraction, prices: Prices) -> int:
    """Micro-units for ``pod_hours`` of the requests (an unset request costs nothing), rounded half to even."""
    per_hour = Fraction(requests.cpu_millicores or 0, 1000) * prices.cpu_per_vcpu_hour \
        + Fraction(requests.memory_bytes or 0, GIB) * prices.memory_per_gib_hour
    return round(per_hour * pod_hours * MICROS)


def format_money(micros: int, currency: str = "USD", *, signed: bool = False) -> str:
    """"$1,234.57" for USD (cents, half to even), "12.30 EUR" otherwise."""
    cents = round(Fraction(micros, MICROS) * 100)
    sign = "-" if cents < 0 else ("+" if signed and cents > 0 else "")
    whole, frac = divmod(abs(cents), 100)
    amount = f"{whole:,}.{frac:02d}"
    return f"{sign}${amount}" if currency == "USD" else f"{sign}{amount} {currency}"
