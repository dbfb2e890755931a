"""PromQL string literals: the one escaping of label values that both halves use, and label-name validation.

Owns the only path by which a value reaches PromQL text. ``quote`` turns any string into a double-quoted
PromQL string literal that the Prometheus lexer reads back as exactly that string (backslash, double quote and
non-printable characters are escaped, as Go's ``strconv.Unquote`` reads them: promql/parser/lex.go
``lexString``; a raw newline or U+FFFD would otherwise end or break the literal). ``regex_literal`` first
escapes the RE2 metacharacters, so the regex matches exactly the value (Prometheus anchors regex matchers at
both ends), then string-escapes the result: two layers. Label *names* are never escaped but validated. The
recommender's query builders (``recommender.sources.promql``) and the updater's analysis templates use these
functions. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RE2_META = frozenset("\\.+*?()|[]{}^$")
_SIMPLE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    simple = _SIMPLE_ESCAPES.get(ch)
    if simple is not None:
        return simple
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF:
        raise ValueError("label value contains a lone surrogate, which is not valid UTF-8")
    if ch.isprintable() and code != 0xFFFD:  # the lexer reads a literal U+FFFD as invalid UTF-8
        return ch
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def quote(value: str) -> str:
    """``value`` as a PromQL double-quoted string literal (Go ``strconv.Unquote`` escapes)."""
    return '"' + "".join(_escape_char(ch) for ch in value) + '"'


def regex_escape(value: str) -> str:
    """``value`` as an RE2 pattern matching exactly ``value``: each metacharacter gets a backslash."""
    return "".join("\\" + ch if ch in _RE2_META else ch for ch in value)


def regex_literal(values: Sequence[str]) -> str:
    """A quoted regex matching exactly one of ``values`` (first the regex layer, then the string layer)."""
    if not values:
        raise ValueError("a regex matcher needs at least one value")
    return quote("|".join(regex_escape(v) for v in values))


def label_name(name: str) -> str:
    """``name`` if it is a valid Prometheus label name, else ValueError (names are never escaped)."""
    if _LABEL_NAME.fullmatch(name) is None:
        raise ValueError(f"invalid label name {name[:64]!r}")
    return name
