"""The documentation's shell blocks that a test runs verbatim, found by the marker comment in front of each.

Owns reading ``README.md`` and ``docs/*.md``: a fenced ``sh`` block right after a line
``<!-- test: NAME -->`` is the block NAME, wherever it is, and its command lines (comments and blank lines
dropped) are what the test of that name runs, each line as it stands through ``bash -c``. A name is marked
once across all those files. ``unmarked_kubectl_lines`` lists every ``kubectl`` command they show outside a
marked block, so that a test can fail on a command nobody runs. ``links`` lists the relative links of a page,
so that a test can check that each one resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
_MARKER = re.compile(r"<!-- test: ([a-z0-9-]+) -->\n\Z")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """The README and every page of ``docs/``: where a tested block may stand."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def _command_lines(body: str) -> list[str]:
    return [line for line in (raw.strip() for raw in body.splitlines()) if line and not line.startswith("#")]


def _blocks(text: str) -> list[tuple[str | None, list[str]]]:
    out = []
    for block in _BLOCK.finditer(text):
        marker = _MARKER.search(text[:block.start()])
        out.append((marker[1] if marker else None, _command_lines(block[1])))
    return out


def _texts(text: str | None) -> list[str]:
    return [p.read_text() for p in pages()] if text is None else [text]


def block(name: str, text: str | None = None) -> list[str]:
    """The command lines of the block marked ``name`` in the README and docs (or in ``text``); AssertionError
    if it is missing or marked more than once."""
    found = [lines for t in _texts(text) for marker, lines in _blocks(t) if marker == name]
    assert len(found) == 1, f"README.md and docs/ have {len(found)} blocks marked <!-- test: {name} -->, not one"
    return found[0]


def marked_names(text: str | None = None) -> list[str]:
    """Every block name marked in the README and docs (or in ``text``), as often as it is marked."""
    return [marker for t in _texts(text) for marker, _ in _blocks(t) if marker is not None]


def unmarked_kubectl_lines(text: str | None = None) -> list[str]:
    """``kubectl`` command lines in README and docs blocks (or ``text``'s) that carry no test marker."""
    return [line for t in _texts(text) for marker, lines in _blocks(t) if marker is None
            for line in lines if line.startswith("kubectl")]


def link_targets(text: str) -> list[str]:
    """The relative link targets of Markdown text (``path``, ``path#anchor`` or ``#anchor``), in order."""
    return [target for target in _LINK.findall(text) if "://" not in target]


def links(page: Path) -> list[str]:
    """``link_targets`` of a page."""
    return link_targets(page.read_text())


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside fenced blocks)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}
