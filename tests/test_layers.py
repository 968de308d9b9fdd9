"""The package's layers read top-down: no module imports a module of a higher layer, and no import circle.

Every ``import`` / ``from ... import`` statement in ``norga/`` counts, wherever it stands (a function-level
import is still a dependency). Registries are filled by name at run time (``importlib``), which is how a
lower layer finds its plug-ins without importing them; those lookups are not import statements.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "norga"

# Lowest first. A module may import modules of its own layer or of lower layers only.
LAYERS: List[List[str]] = [
    ["norga", "norga._version", "norga.errors", "norga.registry", "norga.files", "norga.config"],  # foundation: torch-free
    ["norga.data"],
    ["norga.models"],
    ["norga.toolkit"],  # what methods are built from
    ["norga.methods"],
    ["norga.reports"],  # metrics, statistics, figures, norga summarize
    ["norga.engine"],  # the task loop and everything about a run, above the methods
    ["norga.commands", "norga.__main__", "norga.reproduce"],  # the commands; norga reproduce (grids of runs) is one
    ["norga.theory"],  # stand-alone numerical checks of the papers (they use the real gates)
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best, depth = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            hit = module == prefix or (prefix != "norga" and module.startswith(prefix + "."))
            if hit and len(prefix) > depth:
                best, depth = index, len(prefix)
    assert best is not None, f"{module} is in no layer of tests/test_layers.py: add it to LAYERS"
    return best


def imported_modules(path: Path) -> Set[str]:
    """norga modules imported anywhere in the file (``from . import x`` counts x when it is a module)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "norga"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "norga":
                continue
            found.add(target)
            for alias in node.names:  # from .pkg import submodule
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                        (PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py").exists():
                    found.add(candidate)
    return found


def import_graph() -> Dict[str, Set[str]]:
    return {module_name(p): imported_modules(p) - {module_name(p)} for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_imports_a_higher_layer():
    graph = import_graph()
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in graph.items() for t in sorted(targets)
              if layer_of(t) > layer_of(m)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_import_graph_has_no_circle():
    graph = import_graph()
    # a package's __init__ re-exporting its own modules is not a circle: only module-to-module edges count
    graph = {m: {t for t in targets if not (m.startswith(t + ".") and t in graph)} for m, targets in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def find_cycle(graph: Dict[str, Set[str]]):
    """One cycle of ``graph`` as a list of nodes (first = last), or None. Iterative DFS with colours."""
    colour = {node: 0 for node in graph}  # 0 new, 1 on the stack, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c in graph), None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[child] == 1:
                return path[path.index(child):] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_the_cycle_finder_and_the_layer_rule_can_fail():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert layer_of("norga.engine.task_loop") > layer_of("norga.methods.base") > layer_of("norga.toolkit.training")
    assert layer_of("norga.config") == 0 and layer_of("norga.commands.cli") > layer_of("norga.engine")
