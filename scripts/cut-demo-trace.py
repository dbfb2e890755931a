"""Cut the demo's trace subset out of the full Bitbrains file: ``python scripts/cut-demo-trace.py [SOURCE]``.

Owns the reproducible making of ``tests/data/traces/bitbrains_rnd_2013-08_demo.csv.gz``: the rows of the
series that ``scripts/demo.py`` replays and the unit tests read, unchanged and in file order, gzipped with
a fixed timestamp so the same source gives the same bytes. SOURCE defaults to
``../shared/traces/bitbrains_rnd_2013-08.csv.gz``; the subset is committed, so only a maintainer who
changes the demo's series runs this.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "traces" / "bitbrains_rnd_2013-08.csv.gz"
TARGET = REPO / "tests" / "data" / "traces" / "bitbrains_rnd_2013-08_demo.csv.gz"
# VM 1: the unit tests' first samples; the rest: the demo's workloads (scripts/demo.py WORKLOADS).
SERIES = (1, 3, 8, 9, 28, 33, 41)


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else SOURCE
    if not source.is_file():
        print(f"cut-demo-trace: {source} is missing (it comes with ../shared/traces/)", file=sys.stderr)
        return 2
    wanted = {f"bb-rnd-2013-08-{n}" for n in SERIES}
    kept: dict[str, int] = {}
    with gzip.open(source, "rt", encoding="utf-8", newline="") as src, \
            open(TARGET, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as out:
        out.write(next(src).encode())
        for line in src:
            series = line.split(",", 1)[0]
            if series in wanted:
                out.write(line.encode())
                kept[series] = kept.get(series, 0) + 1
    missing = sorted(wanted - kept.keys())
    if missing:
        print(f"cut-demo-trace: {source} lacks {missing}", file=sys.stderr)
        return 1
    print(f"wrote {TARGET} ({TARGET.stat().st_size:,} bytes): {sum(kept.values()):,} rows of {len(kept)} series")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
