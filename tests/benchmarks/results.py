"""Writing benchmark tables into ``tests/benchmarks/RESULTS.md``.

Owns the file's layout: one section per benchmark between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->`` markers, so each benchmark rewrites its own table and leaves the others alone.
Every section starts with the machine facts and the date of the run that produced it.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine_facts() -> str:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor() or "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"Machine: {os.cpu_count()} cores ({cpu}), {mem_kib / 1048576:.1f} GiB RAM, "
            f"Python {platform.python_version()}, load average at start {load}. "
            f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.")


def write_section(name: str, title: str, body: str) -> None:
    """Replace (or append) the section ``name`` of RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nWritten by `make bench`.\n"
    block = f"<!-- bench:{name} -->\n## {title}\n\n{body.strip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)
