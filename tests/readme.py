"""The README's shell blocks that a test runs verbatim, found by the marker comment in front of each.

Owns reading ``README.md``: a fenced ``sh`` block right after a line ``<!-- test: NAME -->`` is the block
NAME, and its command lines (comments and blank lines dropped) are what the test of that name runs, each
line as it stands through ``bash -c``. ``unmarked_kubectl_lines`` lists every ``kubectl`` command the README
shows outside a marked block, so that a test can fail on a command nobody runs.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
_MARKER = re.compile(r"<!-- test: ([a-z0-9-]+) -->\n\Z")


def _command_lines(body: str) -> list[str]:
    return [line for line in (raw.strip() for raw in body.splitlines()) if line and not line.startswith("#")]


def _blocks(text: str) -> list[tuple[str | None, list[str]]]:
    out = []
    for block in _BLOCK.finditer(text):
        marker = _MARKER.search(text[:block.start()])
        out.append((marker[1] if marker else None, _command_lines(block[1])))
    return out


def block(name: str, text: str | None = None) -> list[str]:
    """The command lines of the README block marked ``name``; AssertionError if it is missing or doubled."""
    found = [lines for marker, lines in _blocks(README.read_text() if text is None else text) if marker == name]
    assert len(found) == 1, f"README.md has {len(found)} blocks marked <!-- test: {name} -->, not one"
    return found[0]


def unmarked_kubectl_lines(text: str | None = None) -> list[str]:
    """``kubectl`` command lines in README blocks that carry no test marker."""
    return [line for marker, lines in _blocks(README.read_text() if text is None else text) if marker is None
            for line in lines if line.startswith("kubectl")]
