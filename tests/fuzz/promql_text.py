"""A small reader of PromQL selector text, written for the tests from the PromQL grammar (not from our builder).

Owns ``selectors(query)``: every ``metric{label op "value", ...}`` of a query with its string literals
decoded the way the Prometheus lexer does (Go ``strconv.Unquote`` rules for double-quoted strings: a raw
newline ends the literal with an error, escapes are ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\" \\' \\xHH \\ooo
\\uHHHH \\UHHHHHHHH``). Anything else raises ``PromqlSyntaxError``. Also ``matches(op, literal, value)``:
whether a decoded matcher selects a label value (regexes fully anchored, as Prometheus does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
           "'": "'"}
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPS = ("=~", "!~", "!=", "=")


class PromqlSyntaxError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str


def _hex(text: str, i: int, n: int) -> tuple[str, int]:
    digits = text[i:i + n]
    if len(digits) != n or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise PromqlSyntaxError(f"bad \\x/\\u escape at {i}")
    code = int(digits, 16)
    if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        raise PromqlSyntaxError("escape is not a valid code point")
    return chr(code), i + n


def read_string(text: str, i: int) -> tuple[str, int]:
    """Decode the double-quoted literal starting at ``text[i] == '"'``; returns (value, index after it)."""
    if text[i:i + 1] != '"':
        raise PromqlSyntaxError(f"expected a string at {i}")
    out, i = [], i + 1
    while True:
        if i >= len(text):
            raise PromqlSyntaxError("unterminated string")
        ch = text[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == "\n" or ch == "\ufffd":
            raise PromqlSyntaxError("newline or invalid UTF-8 in a string")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = text[i + 1:i + 2]
        if esc in _SIMPLE:
            out.append(_SIMPLE[esc])
            i += 2
        elif esc == "x":
            value, i = _hex(text, i + 2, 2)
            out.append(value)
        elif esc in ("u", "U"):
            value, i = _hex(text, i + 2, 4 if esc == "u" else 8)
            out.append(value)
        elif esc in "01234567" and esc:
            digits = text[i + 1:i + 4]
            if len(digits) != 3 or not all(c in "01234567" for c in digits) or int(digits, 8) > 255:
                raise PromqlSyntaxError("bad octal escape")
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise PromqlSyntaxError(f"unknown escape \\{esc!r}")


def _matchers(text: str, i: int) -> tuple[list[Matcher], int]:
    out: list[Matcher] = []
    i += 1  # past "{"
    while True:
        while text[i:i + 1] == " ":
            i += 1
        if text[i:i + 1] == "}":
            return out, i + 1
        m = _LABEL.match(text, i)
        if m is None:
            raise PromqlSyntaxError(f"expected a label name at {i}: {text[i:i + 20]!r}")
        i = m.end()
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is None:
            raise PromqlSyntaxError(f"expected a match operator at {i}")
        value, i = read_string(text, i + len(op))
        out.append(Matcher(m.group(), op, value))
        if text[i:i + 1] == ",":
            i += 1
        elif text[i:i + 1] != "}":
            raise PromqlSyntaxError(f"expected , or }} at {i}")


def selectors(query: str) -> list[tuple[str, list[Matcher]]]:
    """(metric name, matchers) of every vector selector; strings outside selectors are an error."""
    out, i = [], 0
    while i < len(query):
        ch = query[i]
        if ch in "\"'`":
            raise PromqlSyntaxError(f"string literal outside a selector at {i}")
        if ch == "{":
            before = re.search(r"[a-zA-Z_:][a-zA-Z0-9_:]*$", query[max(0, i - 200):i])
            metric = before.group() if before else ""
            matchers, i = _matchers(query, i)
            out.append((metric, matchers))
            continue
        if ch == "}":
            raise PromqlSyntaxError(f"unbalanced }} at {i}")
        i += 1
    return out


def matches(op: str, pattern: str, value: str) -> bool:
    """Whether ``label op pattern`` selects ``value`` (regexes anchored at both ends, RE2-like)."""
    if op == "=":
        return value == pattern
    if op == "!=":
        return value != pattern
    found = re.fullmatch(pattern, value, flags=re.DOTALL) is not None
    return found if op == "=~" else not found
