"""The house's layers, checked on the source: every import of tidelog's own modules points down, never up or
sideways between packages, the package graph has no cycle, and no import of tidelog's own code hides inside a
function (the way to dodge a cycle instead of removing it).

    errors  <-  records  <-  protocol, storage  <-  client  <-  broker  <-  cluster, spark, tools  <-  node
    (the composition root)  <-  cli  <-  console (the web console reuses the CLI's Kafka helpers; ``tidelog
    console`` reaches it through cli/main.py's lazy command table, not an import)

``errors`` (one module, tidelog/errors.py) holds Kafka's error names and codes and the base class of every error
meant for a client, so that every layer, records included, names errors with the one enum.

``client`` is the Kafka client side both the broker and Spark use (TLS/SASL connections, the SCRAM formulas, the
columnar decoder and the sink's record accumulator), as Kafka's ``clients`` module is under its broker.

Imports under ``if TYPE_CHECKING:`` are annotations only: they point down the layers like any other import (an
annotation naming a part of a higher layer is the same dependency), but they do not count as module cycles (the
test for those lists what it finds). The optional C extensions are loaded inside ``try``/``except ImportError``
in the function that decides whether to use them: those are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tidelog"

LAYER = {"errors": -1, "records": 0, "protocol": 1, "storage": 1, "client": 2, "broker": 3, "cluster": 4, "spark": 4,
         "tools": 4, "node": 5, "cli": 6, "console": 7}
C_EXTENSIONS = {"tidelog.records._recwalk", "tidelog.client._columnar", "tidelog.storage._cleanwalk",
                "tidelog.storage._segment", "tidelog.protocol._produce"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    if name in C_EXTENSIONS:
        return True
    path = SRC.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imports(type_only: bool = False) -> list[tuple[str, int, str, bool]]:
    """(importing module, line, imported module, inside a function) for every import of tidelog's own code that
    runs; with ``type_only`` those under ``if TYPE_CHECKING:`` too."""
    out: list[tuple[str, int, str, bool]] = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

        def visit(node: ast.AST, in_function: bool, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    if type_only:
                        for stmt in child.body:
                            visit(ast.Module(body=[stmt], type_ignores=[]), in_function)
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), in_function)
                    continue
                nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    # "from tidelog.records import _recwalk" / "from tidelog.broker import config" import submodules
                    names = [f"{child.module}.{a.name}" if _is_module(f"{child.module}.{a.name}") else child.module
                             for a in child.names]
                else:
                    visit(child, nested)
                    continue
                out.extend((module, child.lineno, n, in_function) for n in names
                           if n.startswith("tidelog.") and n not in C_EXTENSIONS)
        visit(tree, False)
    return out


def test_no_import_of_tidelog_code_inside_a_function() -> None:
    hidden = [f"{m}:{line} imports {target}" for m, line, target, inside in _imports() if inside]
    assert not hidden, "imports hidden in functions:\n" + "\n".join(hidden)


def test_imports_point_down_the_layers() -> None:
    """Runtime and ``TYPE_CHECKING`` imports alike."""
    wrong = []
    for m, line, target, _ in _imports(type_only=True):
        src, dst = _package(m), _package(target)
        if src is None or dst is None or src == dst:
            continue
        assert src in LAYER and dst in LAYER, f"{m} -> {target}: a package this test does not know; add its layer"
        if LAYER[dst] >= LAYER[src]:
            wrong.append(f"{m}:{line} imports {target} ({src} is not above {dst})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_no_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for m, _, target, _ in _imports():
        graph.setdefault(m, set()).add(target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Module cycles that exist only through ``if TYPE_CHECKING:`` imports (annotations), as found when this check came
# in (issue 26, item 2). The large one has a hub: the parts of broker/ name the ``Broker`` that composes them
# (``ANNOTATION_HUB``), so the test leaves that module out (every new handler module joins it); what remains are
# these pairs, each a part naming its owner's class. They go away as parts get stated interfaces (Protocols):
# shrink this list, never grow it.
ANNOTATION_HUB = "tidelog.broker.broker"
KNOWN_ANNOTATION_CYCLES: list[frozenset[str]] = []  # empty since D0065: topic backends see a TopicStore Protocol,
# elections an election-host Protocol


def _strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(frozenset(component))
    return out


def test_annotation_imports_form_no_new_cycle() -> None:
    """Counting ``TYPE_CHECKING`` imports and leaving out the ``Broker`` hub, every module cycle lies inside one of
    the known ones."""
    graph: dict[str, set[str]] = {}
    for m, _, target, _ in _imports(type_only=True):
        if ANNOTATION_HUB not in (m, target):
            graph.setdefault(m, set()).add(target)
    new = [sorted(c) for c in _strongly_connected(graph) if not any(c <= known for known in KNOWN_ANNOTATION_CYCLES)]
    assert not new, "module cycles through TYPE_CHECKING imports:\n" + "\n".join(" <-> ".join(c) for c in new)


def test_storage_does_not_import_a_user_interface() -> None:
    """Storage reports recovery progress through ``storage.progress.RecoveryProgress``; the bar is the CLI's."""
    found = []
    for path in sorted((SRC / "storage").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(SRC)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in ("rich", "click")]
    assert not found, "\n".join(found)
