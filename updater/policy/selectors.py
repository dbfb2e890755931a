"""PromQL selectors of an analysis query (pure): parsing a query, and confining every selector to one namespace.

Owns two things. ``check_query`` parses a query with ``promql-parser`` (the Rust port of Prometheus' own
parser, compatible with Prometheus 2.45's grammar) and raises ``QueryError`` with the parser's message when
it does not parse. ``confine`` adds the matcher ``namespace="<ns>"`` to every vector selector of a query, as
Prometheus' own ``promql/parser`` would see them (``parser.Inspect`` over ``*VectorSelector`` nodes, whether
bare, in a range or in a subquery). promql-parser's printer does not escape label values (a ``"`` in a value is
written as is), so the text is not re-printed from the tree: a small lexer here finds each selector in the text
and inserts the matcher, the value escaped by ``podtailor.promql.quote``; then the result is parsed again and
every vector selector in the tree must carry that matcher, else ``QueryError``. A selector with ``or`` between
matcher groups (Prometheus 3) is refused in a confined query, since one inserted matcher covers one group only.
"""

from __future__ import annotations

import re

import promql_parser

from podtailor.promql import quote

NAMESPACE_LABEL = "namespace"
_AGGREGATORS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and",
                       "or", "unless", "atan2", "inf", "nan"})
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_CLOSING = {"{": "}", "[": "]"}
_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[a-zA-Z0-9_]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:.]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


class QueryError(ValueError):
    """A query that does not parse, or that cannot be confined to a namespace; the message says why."""


def check_query(text: str) -> promql_parser.Expr:
    """The parsed query; ``QueryError`` with the parser's message when it is not PromQL."""
    if not text.strip():
        raise QueryError("the query is empty")
    try:
        return promql_parser.parse(text)
    except ValueError as err:
        raise QueryError(f"not a PromQL query: {err}") from None


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, start) of every token; spaces and comments left out."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind != "space":
            out.append((kind, m.group(), m.start()))
    return out


def _selector_inserts(text: str) -> list[int]:
    """Offsets in ``text`` just after the ``{`` of each vector selector, or where ``{}`` must be added (a bare
    metric name): those are negative (``-offset``, the position after the name) so the caller can tell them."""
    toks = _tokens(text)
    out: list[int] = []
    label_list = False  # inside the parentheses of by/without/on/ignoring/group_left/group_right
    closing = ""  # inside a selector's matchers or a range: the token that ends it
    for i, (kind, tok, start) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        prev = toks[i - 1][1].lower() if i > 0 else ""
        if tok == "(" and prev in _LABEL_LISTS:
            label_list = True
        elif tok == ")" and label_list:
            label_list = False
        if closing or label_list:
            closing = "" if tok == closing else closing
            continue
        closing = _CLOSING.get(tok, "")
        if tok == "{" and not (i > 0 and toks[i - 1][0] == "ident" and _is_metric(toks, i - 1)):
            out.append(start + 1)  # a bare {...} selector
        elif kind == "ident" and _is_metric(toks, i):
            out.append(toks[i + 1][2] + 1 if nxt == "{" else -(start + len(tok)))
    return out


def _is_metric(toks: list[tuple[str, str, int]], i: int) -> bool:
    tok = toks[i][1]
    nxt = toks[i + 1][1].lower() if i + 1 < len(toks) else ""
    if tok.lower() in _KEYWORDS or nxt == "(":
        return False
    if tok in _AGGREGATORS and nxt in ("by", "without"):
        return False
    prev = toks[i - 1][1] if i > 0 else ""
    return prev != "@"  # "@ start()" is a call; any other identifier after @ does not parse anyway


def confine(text: str, namespace: str) -> str:
    """``text`` with ``namespace="<namespace>"`` first in every vector selector, checked by parsing the result."""
    check_query(text)
    matcher = f"{NAMESPACE_LABEL}={quote(namespace)}"
    out, last = [], 0
    for pos in _selector_inserts(text):
        at = abs(pos)
        out.append(text[last:at])
        closing = text[at:].lstrip().startswith("}")
        out.append("{" + matcher + "}" if pos < 0 else matcher if closing else matcher + ",")
        last = at
    out.append(text[last:])
    confined = "".join(out)
    _check_confined(check_query(confined), namespace)
    return confined


def _check_confined(expr: promql_parser.Expr, namespace: str) -> None:
    missing: list[str] = []

    def visit(node: promql_parser.Expr) -> None:
        if not isinstance(node, promql_parser.VectorSelector):
            return
        if node.matchers.or_matchers:
            raise QueryError("a selector with 'or' between matcher groups cannot be confined to a namespace")
        if not any(m.name == NAMESPACE_LABEL and m.op == promql_parser.MatchOp.Equal and m.value == namespace
                   for m in node.matchers.matchers):
            missing.append(str(node.name or node.matchers))

    promql_parser.walk(expr, pre_visit=visit)
    if missing:
        raise QueryError(f"cannot confine the selectors {missing[:3]} to namespace {namespace!r}")
