"""The house's layers, checked on the source: every import of tidelog's own modules points down, never up or
sideways between packages, the package graph has no cycle, and no import of tidelog's own code hides inside a
function (the way to dodge a cycle instead of removing it).

    records  <-  protocol, storage  <-  broker  <-  cluster, spark, tools  <-  node (the composition root)  <-  cli
    <-  console (the web console reuses the CLI's Kafka helpers; ``tidelog console`` reaches it through
    cli/main.py's lazy command table, not an import)

Imports under ``if TYPE_CHECKING:`` are annotations only and do not count. The optional C extensions are loaded
inside ``try``/``except ImportError`` in the function that decides whether to use them: those are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tidelog"

LAYER = {"records": 0, "protocol": 1, "storage": 1, "broker": 2, "cluster": 3, "spark": 3, "tools": 3, "node": 4,
         "cli": 5, "console": 6}
C_EXTENSIONS = {"tidelog.records._recwalk", "tidelog.records._columnar", "tidelog.storage._cleanwalk",
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


def _imports() -> list[tuple[str, int, str, bool]]:
    """(importing module, line, imported module, inside a function) for every import of tidelog's own code."""
    out: list[tuple[str, int, str, bool]] = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

        def visit(node: ast.AST, in_function: bool, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
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
    wrong = []
    for m, line, target, _ in _imports():
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
