"""The module-size check of ``make lint``: every module of the product packages stays under the line cap.

Owns the house rule "modules under 400 lines" as a check that can fail: it counts the lines of each ``*.py``
under ``podtailor/``, ``recommender/`` and ``updater/`` (or the folders given) and, when any module has more
than ``--max`` lines, prints each such file with its length and exits 1. A folder that does not exist is an
error (exit 2), so a typo cannot turn the check into one that always passes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_LINES = 400
"""The cap of HOUSE-STYLE.md ("modules under ~400 lines"), checked as: more than 400 lines fails."""
PACKAGES = ("podtailor", "recommender", "updater")


@dataclass(frozen=True, slots=True, kw_only=True)
class Oversized:
    path: Path
    lines: int


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them, plus a last line without its newline."""
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized(folders: Iterable[Path], max_lines: int = MAX_LINES) -> list[Oversized]:
    """Every module under ``folders`` with more than ``max_lines`` lines, longest first."""
    found = [Oversized(path=p, lines=n) for folder in folders for p in sorted(folder.rglob("*.py"))
             if (n := line_count(p)) > max_lines]
    return sorted(found, key=lambda o: (-o.lines, str(o.path)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[Path(p) for p in PACKAGES])
    parser.add_argument("--max", type=int, default=MAX_LINES, help="most lines a module may have (default 400)")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"check_module_size: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    over = oversized(args.folders, args.max)
    for o in over:
        print(f"{o.path}: {o.lines} lines (more than {args.max})")
    if over:
        print(f"{len(over)} module(s) over {args.max} lines: split them by what they own", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
