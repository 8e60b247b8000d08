"""Filter expressions of the console's search: a small, safe language with Python's syntax, evaluated by walking
its syntax tree (never ``eval``).

Names: ``key`` and ``value`` (text, None when null), ``headers`` (name -> text; the last of repeated names),
``json`` (the value parsed as JSON, None when it is not JSON), ``partition``, ``offset``, ``timestamp`` (ms).
Allowed: constants (strings, numbers, True/False/None), ``and`` / ``or`` / ``not``, comparisons (``==``, ``!=``,
``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``), subscripts (``headers["trace"]``, ``json["order"]["id"]``,
``json["items"][0]``). Anything else (calls, attributes, lambdas, comprehensions...) is refused when the search
starts, with the reason. A record whose expression fails (a missing key, comparing None with a number) does not
match. Examples: ``headers["trace"] == "abc" and offset >= 1000``, ``json["total"] > 100``,
``"error" in value and partition in [0, 1]``.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

NAMES = ("key", "value", "headers", "json", "partition", "offset", "timestamp")
MAX_LENGTH = 2000
MAX_NODES = 200

_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


class FilterError(ValueError):
    pass


def compile_filter(text: str) -> Callable[[dict[str, Any]], bool]:
    """The expression as a predicate over a record's names; FilterError (with the reason) when it is not one."""
    if len(text) > MAX_LENGTH:
        raise FilterError(f"a filter expression of at most {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FilterError(f"not an expression: {exc.msg}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise FilterError(f"a filter expression of at most {MAX_NODES} parts")
    for node in nodes:
        _check(node)
    fn = _compile(tree.body)

    def predicate(record: dict[str, Any]) -> bool:
        try:
            return bool(fn(record))
        except (KeyError, IndexError, TypeError, ValueError):
            return False

    return predicate


def _check(node: ast.AST) -> None:
    if isinstance(node, ast.Expression | ast.Load | ast.And | ast.Or | ast.Not | ast.USub | ast.BoolOp | ast.Compare
                  | ast.Subscript | ast.List | ast.Tuple):
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.Not | ast.USub):
            raise FilterError("only 'not' and '-' as unary operators")
        return
    if isinstance(node, ast.cmpop):
        if type(node) not in _COMPARE:
            raise FilterError("comparisons: ==, !=, <, <=, >, >=, in, not in")
        return
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, str | int | float | bool | type(None)):
            raise FilterError("constants: strings, numbers, True, False, None")
        return
    if isinstance(node, ast.Name):
        if node.id not in NAMES and node.id not in ("True", "False", "None"):
            raise FilterError(f"unknown name {node.id!r} (one of {', '.join(NAMES)})")
        return
    raise FilterError(f"{type(node).__name__} is not allowed in a filter expression")


Fn = Callable[[dict[str, Any]], Any]


def _compile(node: ast.AST) -> Fn:
    """The checked tree turned once into nested closures (a record is then evaluated without walking the tree)."""
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda r: all(f(r) for f in parts)
        return lambda r: any(f(r) for f in parts)
    if isinstance(node, ast.UnaryOp):
        inner = _compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda r: not inner(r)
        return lambda r: -inner(r)
    if isinstance(node, ast.Compare):
        first = _compile(node.left)
        steps = [(_COMPARE[type(op)], _compile(c)) for op, c in zip(node.ops, node.comparators)]

        def compare(r: dict[str, Any]) -> bool:
            left = first(r)
            for cmp, right_fn in steps:
                right = right_fn(r)
                if not cmp(left, right):
                    return False
                left = right
            return True

        return compare
    if isinstance(node, ast.Subscript):
        container, index = _compile(node.value), _compile(node.slice)
        return lambda r: container(r)[index(r)]
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda r: value
    if isinstance(node, ast.Name):
        name = node.id
        if name == "json":
            return _json
        return lambda r: r[name]
    if isinstance(node, ast.List | ast.Tuple):
        elts = [_compile(e) for e in node.elts]
        if all(isinstance(e, ast.Constant) for e in node.elts):
            frozen = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            return lambda r: frozen
        return lambda r: [f(r) for f in elts]
    raise FilterError(f"{type(node).__name__} is not allowed")  # refused by _check already


def _json(rec: dict[str, Any]) -> Any:
    if "json" not in rec:
        try:
            rec["json"] = json.loads(rec["value"]) if rec.get("value") is not None else None
        except ValueError:
            rec["json"] = None
    return rec["json"]
