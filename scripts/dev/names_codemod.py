"""Names, not numbers (issue 26 item 5): rewrite Kafka error codes and API keys written as literals into members of
``tidelog.errors.ErrorCode`` and ``tidelog.protocol.api_keys.ApiKey``.

AST based (positions from ``ast``, the text around them kept byte for byte), idempotent (a second run changes
nothing), and it prints every change. Run it from the repository root after merging other branches:

    .venv/bin/python scripts/dev/names_codemod.py [--check] [paths...]   (default: src tests bench)

``--check`` prints what it would change and exits 1 if anything would. What it rewrites, outside
``src/tidelog/protocol/`` and ``src/tidelog/errors.py``:

* an error *name* as a string where the code wants an error: the first argument (or ``kafka_error=``) of
  ``PartitionError``/``TopicError``/``DynamicConfigError`` (or any non-builtin ``...Error`` class); ``error_code("X")`` / ``code_of("X")`` /
  ``ERRORS_BY_NAME["X"].code`` (the whole expression); a string assigned to ``kafka_error`` or a
  ``kafka_error`` parameter's default; a string compared with ``x.kafka_error`` or ``getattr(x, "kafka_error")``
  and ``getattr(x, "kafka_error", "X")``'s default  ->  ``ErrorCode.X``;
* on the server side (broker/, cluster/, storage/, records/) any other string that is an error's name (not a
  docstring, an f-string or a metric label): there every name is ours, and a name left a string next to members
  would silently never compare equal;
* an error *code* as an int (not 0, see below) in ``"error_code": n``, ``error_code=n``, or compared with
  something named ``*error_code``  ->  ``ErrorCode.X`` (src/ only: tests may assert wire numbers);
* a module constant spelling an error (``NOT_COORDINATOR = 16``) or an API key (``FETCH_KEY = 1``,
  ``INIT_PRODUCER_ID = 22``) by its own name with Kafka's value  ->  the member; an int compared with something
  named ``*api_key``  ->  ``ApiKey.X``.

``0`` (NONE) stays a literal (and ``NONE = 0`` a plain int) where it is the "no error" of a response field: it
is the value in every Kafka error field of a successful answer, written in the hot paths' response dicts thousands
of times a second, and the Produce fast lane's C encoder takes exact ints there (an ``ErrorCode.NONE`` in a
Produce answer would send every Produce to the generic encoder). ``tests/test_names.py`` holds the same rules as a check.
It adds ``from tidelog.errors import ErrorCode`` / ``from tidelog.protocol.api_keys import ApiKey`` where a file
comes to use a name it does not import.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import itertools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from tidelog.errors import ErrorCode  # noqa: E402
from tidelog.protocol.api_keys import ApiKey  # noqa: E402

ERROR_NAMES = {e.name for e in ErrorCode}
ERROR_BY_VALUE = {int(e): e.name for e in ErrorCode}
API_NAMES = {k.name for k in ApiKey}
API_BY_VALUE = {int(k): k.name for k in ApiKey}
#: classes whose first argument is the Kafka error (and any other non-builtin ``...Error`` called with an error's
#: name as its first argument)
ERROR_CLASSES = {"PartitionError", "TopicError", "DynamicConfigError"}
#: lookups replaced whole by the member
LOOKUPS = {"error_code", "code_of"}
#: where every error name in the code is tidelog's own (the client side compares names from client libraries)
SERVER_SIDE = ("src/tidelog/broker/", "src/tidelog/cluster/", "src/tidelog/storage/", "src/tidelog/records/")
#: calls whose string arguments are metric labels (they stay names)
METRIC_LABELS = {"record_error"}
#: module constants that share a Kafka error's name and value but mean something else (``NONE = 0`` is left
#: alone anyway: 0 is the allowed literal)
NOT_ERRORS: set[tuple[str, str]] = set()
IMPORTS = {"ErrorCode": "from tidelog.errors import ErrorCode",
           "ApiKey": "from tidelog.protocol.api_keys import ApiKey"}
MODULE_OF = {"ErrorCode": "tidelog.errors", "ApiKey": "tidelog.protocol.api_keys"}


def excluded(rel: str) -> bool:
    # tests/test_names.py calls the lookup with a string on purpose
    return rel.startswith(("src/tidelog/protocol/", "scripts/dev/")) or rel in ("src/tidelog/errors.py",
                                                                               "tests/test_names.py")


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(
            node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
        return node.args[1].value
    return None


def int_value(node: ast.AST) -> int | None:
    """The value of an int literal (``-1`` included), else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node, sign = node.operand, -1
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def is_error_code_name(name: str | None) -> bool:
    return bool(name) and name.lower().endswith("error_code")  # type: ignore[union-attr]


def is_api_key_name(name: str | None) -> bool:
    return bool(name) and name.lower().endswith("api_key")  # type: ignore[union-attr]


def is_kafka_error(node: ast.AST) -> bool:
    return _name(node) == "kafka_error"


def _elements(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]


class Finder:
    """Collects (node, replacement) for one file."""

    def __init__(self, rel: str, tree: ast.Module) -> None:
        self.rel = rel
        self.src_file = rel.startswith("src/")
        self.out: list[tuple[ast.AST, str]] = []
        self.tree = tree

    def name_str(self, node: ast.AST | None) -> None:
        """A string literal naming a Kafka error (inside ``node``) -> ErrorCode.X."""
        if node is None:
            return
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in ERROR_NAMES:
                self.out.append((n, f"ErrorCode.{n.value}"))

    def code_int(self, node: ast.AST, allow_zero: bool = True) -> None:
        for n in _elements(node):
            v = int_value(n)
            if v is None or v not in ERROR_BY_VALUE or (v == 0 and allow_zero):
                continue
            self.out.append((n, f"ErrorCode.{ERROR_BY_VALUE[v]}"))

    def key_int(self, node: ast.AST) -> None:
        for n in _elements(node):
            v = int_value(n)
            if v is not None and v in API_BY_VALUE:
                self.out.append((n, f"ApiKey.{API_BY_VALUE[v]}"))

    def server_names(self) -> None:
        """On the server side every error name is ours: any string that is one (not a docstring, not inside an
        f-string, not a metric label) becomes the member, so names never mix with members (an IntEnum member never
        equals its name: a mix would make ``err in ("X", ...)`` silently false)."""
        skip: set[int] = set()
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body and \
                    isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant):
                skip.add(id(n.body[0].value))
            elif isinstance(n, ast.JoinedStr):
                skip |= {id(c) for c in ast.walk(n)}
            elif isinstance(n, ast.Call) and _name(n.func) in METRIC_LABELS:
                skip |= {id(c) for a in n.args for c in ast.walk(a)}
            elif isinstance(n, ast.Subscript) and _name(n.value) in ("ERRORS_BY_NAME", "ErrorCode"):
                skip |= {id(c) for c in ast.walk(n.slice)}
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in ERROR_NAMES and id(n) not in skip:
                self.out.append((n, f"ErrorCode.{n.value}"))

    def run(self) -> list[tuple[ast.AST, str]]:
        for node in self.tree.body:  # module constants
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                v = int_value(node.value)
                for t in targets:
                    if not isinstance(t, ast.Name) or v is None:
                        continue
                    bare = t.id.strip("_")
                    if bare in ERROR_NAMES and int(ErrorCode[bare]) == v and v != 0 and (self.rel, bare) not in NOT_ERRORS:
                        self.out.append((node.value, f"ErrorCode.{bare}"))
                        break
                    for api in (bare, bare.removesuffix("_KEY")):
                        if api in API_NAMES and int(ApiKey[api]) == v:
                            self.out.append((node.value, f"ApiKey.{api}"))
                            break
        if self.rel.startswith(SERVER_SIDE):
            self.server_names()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                fname = _name(node.func)
                if fname in ERROR_CLASSES or ((fname or "").endswith("Error") and not hasattr(builtins, fname or "")):
                    if node.args and isinstance(node.args[0], ast.Constant):
                        self.name_str(node.args[0])
                    for kw in node.keywords:
                        if kw.arg == "kafka_error":
                            self.name_str(kw.value)
                elif fname in LOOKUPS and isinstance(node.func, ast.Name) and len(node.args) == 1 and isinstance(
                        node.args[0], ast.Constant) and node.args[0].value in ERROR_NAMES:
                    self.out.append((node, f"ErrorCode.{node.args[0].value}"))
                elif _name(node) == "kafka_error" and len(node.args) == 3:  # getattr(x, "kafka_error", "X")
                    self.name_str(node.args[2])
                for kw in node.keywords:
                    if self.src_file and is_error_code_name(kw.arg):
                        self.code_int(kw.value)
            elif isinstance(node, ast.Attribute) and node.attr == "code" and isinstance(node.value, ast.Subscript) \
                    and _name(node.value.value) == "ERRORS_BY_NAME" and isinstance(node.value.slice, ast.Constant) \
                    and node.value.slice.value in ERROR_NAMES:
                self.out.append((node, f"ErrorCode.{node.value.slice.value}"))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(is_kafka_error(t) for t in targets):
                    self.name_str(node.value)
            elif isinstance(node, ast.arguments):
                params = [*node.posonlyargs, *node.args]
                for p, d in zip(params[len(params) - len(node.defaults):], node.defaults, strict=True):
                    if p.arg == "kafka_error":
                        self.name_str(d)
                for p, d in zip(node.kwonlyargs, node.kw_defaults, strict=True):
                    if p.arg == "kafka_error":
                        self.name_str(d)
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for a, b in itertools.pairwise(sides):
                    for x, y in ((a, b), (b, a)):
                        if is_kafka_error(x):
                            for e in _elements(y):
                                if isinstance(e, ast.Constant):
                                    self.name_str(e)
                        elif self.src_file and is_error_code_name(_name(x)):
                            self.code_int(y)
                        elif self.src_file and is_api_key_name(_name(x)):
                            self.key_int(y)
            elif isinstance(node, ast.Dict) and self.src_file:
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str) and is_error_code_name(k.value):
                        self.code_int(v)
        seen: set[int] = set()  # a node two rules find is one change
        return [(n, new) for n, new in self.out if not (id(n) in seen or seen.add(id(n)))]  # type: ignore[func-returns-value]


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _bound_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
    return names


def add_import(text: str, name: str) -> str:
    tree = ast.parse(text)
    if name in _bound_names(tree):
        return text
    module = MODULE_OF[name]
    lines = text.splitlines(keepends=True)
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    for n in top:  # extend a one-line "from module import a, b"
        if isinstance(n, ast.ImportFrom) and n.module == module and n.lineno == n.end_lineno and not any(
                a.asname for a in n.names):
            names = sorted({a.name for a in n.names} | {name}, key=lambda s: (not s[0].isupper(), s))
            new = f"from {module} import {', '.join(names)}\n"
            if len(new) <= 111:
                lines[n.lineno - 1] = new
                return "".join(lines)
    ours = [n for n in top if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tidelog")]
    after = [n for n in ours if (n.module or "") > module]
    if after:
        at = after[0].lineno - 1
    elif ours:
        at = ours[-1].end_lineno or ours[-1].lineno
    elif top:
        at = top[-1].end_lineno or top[-1].lineno
        lines.insert(at, "\n")
        at += 1
    else:
        at = 0
    lines.insert(at, IMPORTS[name] + "\n")
    return "".join(lines)


def rewrite(path: Path, rel: str) -> tuple[str, list[str]]:
    return rewrite_text(path.read_text(encoding="utf-8"), rel)


def rewrite_text(text: str, rel: str) -> tuple[str, list[str]]:
    """(the new text, one line per change) for the source of the file at ``rel`` (a path from the root)."""
    tree = ast.parse(text)
    edits = Finder(rel, tree).run()
    if not edits:
        return text, []
    starts = _offsets(text)
    spans: dict[tuple[int, int], tuple[str, int]] = {}
    for node, new in edits:
        a = starts[node.lineno - 1] + _col(text, starts, node.lineno, node.col_offset)
        b = starts[node.end_lineno - 1] + _col(text, starts, node.end_lineno, node.end_col_offset)  # type: ignore
        spans[(a, b)] = (new, node.lineno)
    # an outer edit (a whole lookup call) wins over one inside it
    chosen = sorted(spans.items())
    kept: list[tuple[tuple[int, int], tuple[str, int]]] = []
    for span, val in sorted(chosen, key=lambda s: (s[0][0], -s[0][1])):
        if kept and span[0] < kept[-1][0][1]:
            continue
        kept.append((span, val))
    report = []
    for (a, b), (new, line) in reversed(kept):
        old = text[a:b]
        if old == new:
            continue
        report.append(f"{rel}:{line}: {old} -> {new}")
        text = text[:a] + new + text[b:]
    for name in ("ErrorCode", "ApiKey"):
        if any(f"{name}." in r.split(" -> ")[1] for r in report):
            text = add_import(text, name)
    return drop_unused(text), list(reversed(report))


#: names the rewrite can leave unused (an import of them is dropped when nothing else uses them)
REPLACED = {"error_code", "code_of", "ERRORS_BY_NAME"}


def drop_unused(text: str) -> str:
    tree = ast.parse(text)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    lines = text.splitlines(keepends=True)
    for node in reversed(tree.body):
        if not isinstance(node, ast.ImportFrom) or node.lineno != node.end_lineno or any(a.asname for a in node.names):
            continue
        drop = {a.name for a in node.names if a.name in REPLACED and a.name not in used}
        if not drop:
            continue
        keep = [a.name for a in node.names if a.name not in drop]
        lines[node.lineno - 1] = f"from {node.module} import {', '.join(keep)}\n" if keep else ""
    return "".join(lines)


def _col(text: str, starts: list[int], lineno: int, col: int) -> int:
    """ast's col_offset counts UTF-8 bytes: the character index in the line."""
    line = text[starts[lineno - 1]:starts[lineno]]
    return len(line.encode()[:col].decode())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if something would change")
    ap.add_argument("paths", nargs="*", default=["src", "tests", "bench"])
    args = ap.parse_args(argv)
    changed = 0
    touched: list[str] = []
    for root in args.paths:
        base = ROOT / root
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in files:
            rel = path.relative_to(ROOT).as_posix()
            if excluded(rel):
                continue
            new, report = rewrite(path, rel)
            for r in report:
                print(r)
            if report:
                changed += len(report)
                if not args.check:
                    path.write_text(new, encoding="utf-8")
                    touched.append(str(path))
    print(f"{'would change' if args.check else 'changed'} {changed} place(s)", file=sys.stderr)
    if touched and not args.check:  # the added imports in isort's order, as ruff wants them
        ruff = Path(sys.executable).with_name("ruff")
        subprocess.run([str(ruff) if ruff.exists() else "ruff", "check", "--fix", "--select", "I", "--quiet",
                        *touched], check=False)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
