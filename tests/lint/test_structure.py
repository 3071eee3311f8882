"""The house's shape, checked: no import circle in nsqpy/, no class over 650 lines, and
nsqpy/internal/ (what the daemons share) importing nothing of a daemon's own.

A class that outgrows the size rule is pointing at a seam: a part with its own state and its own
job that it can own and call through a small interface. It is never a reason to split a class
for its own sake (mixins over one shared state, a file cut in two at a line count): one cohesive
class reads better than pieces that only make sense together.

Imports are read with ast, wherever they are written (module level, under TYPE_CHECKING, inside
a function), since a circle through a lazy import is a circle all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.daemons import ROOT

PACKAGE = ROOT / "nsqpy"
MAX_CLASS_LINES = 650


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the nsqpy modules it imports (package parents of itself left out)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                found = [mod] + [f"{mod}.{a.name}" for a in node.names]
            deps.update(
                d
                for d in found
                if d in mods and d != name and not name.startswith(d + ".") and d != "nsqpy"
            )
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_import_circle() -> None:
    assert _circles(_imports(_modules())) == []


def test_circle_finder_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_internal_imports_no_daemon_module() -> None:
    graph = _imports(_modules())
    wrong = {
        m: sorted(d for d in deps if not d.startswith("nsqpy.internal"))
        for m, deps in graph.items()
        if m.startswith("nsqpy.internal")
    }
    assert {m: d for m, d in wrong.items() if d} == {}


def test_no_class_over_650_lines() -> None:
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    big.append(f"{path.relative_to(ROOT)}:{node.name} {lines}")
    assert big == []


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: its body's, those under a plain ``if``
    or ``try`` included, those under ``if TYPE_CHECKING:`` and inside functions left out."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                todo.extend(node.body)
            todo.extend(node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body)
            todo.extend(node.orelse)
            todo.extend(node.finalbody)
            for handler in node.handlers:
                todo.extend(handler.body)
    return found


def test_replication_is_opt_in() -> None:
    """Only the daemon with --etcd-endpoints loads nsqpy/replication: no module outside it
    imports it when imported (only inside the functions that run with the flag)."""
    graph_mods = _modules()
    wrong = []
    for name, path in graph_mods.items():
        if name.startswith("nsqpy.replication"):
            continue
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _module_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                mods = [".".join(base + ([node.module] if node.module else []))]
                mods += [f"{mods[0]}.{a.name}" for a in node.names]
            if any(m == "nsqpy.replication" or m.startswith("nsqpy.replication.") for m in mods):
                wrong.append(f"{name}:{node.lineno}")
    assert wrong == []
