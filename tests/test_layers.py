"""The package's layers read top-down: no module imports a module of a higher layer, and no import circle.

Every ``import`` / ``from ... import`` statement in ``norga/`` counts, wherever it stands (a function-level
import is still a dependency), and so does every run-time import, ``importlib.import_module(NAME)``, whose
name is a string in the code (a literal or a module-level constant). A plug-in registry may climb at run time
(a lower layer importing the package that registers into it, by name): each such climb is declared in
:data:`PLUGIN_REGISTRIES` (and in the registry's docstring); any other climb fails like an import statement. A
run-time import whose name is data (a registry's value, a list of third-party packages) is declared in
:data:`DATA_NAMED_IMPORTS`; an undeclared one fails, so no climb hides behind a variable.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "norga"

# Lowest first. A module may import modules of its own layer or of lower layers only.
LAYERS: List[List[str]] = [
    # foundation (norga.outputs: the write guard every layer writes through)
    ["norga", "norga._version", "norga.errors", "norga.interrupts", "norga.registry", "norga.files", "norga.outputs",
     "norga.config"],
    ["norga.data"],
    ["norga.gates"],  # the prefix gates: option schema and config section (torch-free), modules, registry
    ["norga.models"],
    ["norga.toolkit"],  # what methods are built from
    ["norga.methods"],
    ["norga.reports"],  # metrics, statistics, figures, norga summarize
    ["norga.engine"],  # the task loop and everything about a run, above the methods
    ["norga.sweep"],  # grids of runs from a sweep file: points, status, launchers (local, submitit / SLURM)
    ["norga.reproduce"],  # grids of runs from a manifest (the paper's tables): runs them through the engine
    ["norga.tune"],  # norga tune: Optuna studies on protocols; trials through the engine, workers through sweep
    ["norga.commands", "norga.__main__"],  # every command (norga reproduce: commands/reproduce_command.py)
]
# theory/ (the papers' numerical checks) is beside the package, not in it: it may import norga, never the reverse

# (registry module, package it imports by name at run time so that the package's modules register themselves)
PLUGIN_REGISTRIES = {("norga.config.registry", "norga.methods")}
# module -> what its run-time imports of names held in data load
DATA_NAMED_IMPORTS = {
    "norga.methods": "the implementation module a registered method config names (norga.methods.*)",
    "norga.commands.environment": "the third-party packages norga doctor checks (torch, torchvision, timm)",
}


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
    """norga modules imported anywhere in the file (``from . import x`` counts x when it is a module), by statement or
    by ``importlib.import_module`` at run time."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found: Set[str] = {name for name in runtime_imports(tree, module) if name.split(".")[0] == "norga"}
    for node in ast.walk(tree):
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


def runtime_imports(tree: ast.Module, module: str) -> Set[str]:
    """Names passed to ``import_module`` in ``tree``: a string literal, a module-level string constant, or
    ``f"{__name__}.x"`` (the module's own submodules, counted as the module). Any other argument must be declared in
    DATA_NAMED_IMPORTS, else AssertionError."""
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    found: Set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and
                getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in constants:
            found.add(constants[arg.id])
        elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.FormattedValue) and \
                getattr(arg.values[0].value, "id", None) == "__name__":
            found.add(module)
        else:
            assert module in DATA_NAMED_IMPORTS, (
                f"{module} line {node.lineno}: import_module of a name the layer test cannot read; pass a string "
                "constant, or declare what it loads in DATA_NAMED_IMPORTS (tests/test_layers.py)")
    return found


def import_graph() -> Dict[str, Set[str]]:
    """module -> norga modules it imports; a declared plug-in registry's run-time import is left out."""
    graph = {module_name(p): imported_modules(p) - {module_name(p)} for p in sorted(PACKAGE.rglob("*.py"))}
    for registry, plugins in PLUGIN_REGISTRIES:
        assert plugins in graph[registry], f"{registry} no longer imports {plugins}: remove it from PLUGIN_REGISTRIES"
        graph[registry] = graph[registry] - {plugins}
    return graph


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
    assert layer_of("norga.commands.reproduce_command") > layer_of("norga.reproduce.runner") > layer_of("norga.engine")


def test_a_runtime_import_counts_unless_declared():
    climb = ast.parse('import importlib\nSECTION = "norga.engine"\n'
                      'def f(x):\n    importlib.import_module(SECTION)\n    importlib.import_module("norga.methods")\n')
    assert runtime_imports(climb, "norga.config.schema") == {"norga.engine", "norga.methods"}
    hidden = ast.parse("import importlib\ndef f(x):\n    importlib.import_module(x)\n")
    with pytest.raises(AssertionError, match="DATA_NAMED_IMPORTS"):
        runtime_imports(hidden, "norga.config.schema")
    assert layer_of("norga.methods") > layer_of("norga.config.registry")
    assert "norga.methods" in imported_modules(PACKAGE / "config" / "registry.py")  # seen, then allowed as declared


# ---- theory/: beside the package, outside the wheel ------------------------------------------------------
THEORY = PACKAGE.parent / "theory"


def test_theory_is_outside_the_package_and_uses_only_public_names_of_norga():
    """theory/ imports norga (the real gates), never a private name or module of it; norga never imports theory."""
    private = []
    for path in sorted(THEORY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "norga":
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.split(".")[0] == "norga"]
            else:
                continue
            private += [f"{path.relative_to(THEORY.parent)}:{node.lineno}: {name}" for name in names
                        if any(part.startswith("_") for part in name.split("."))]
    assert not private, "theory/ imports private names of norga:\n" + "\n".join(private)
    assert sorted(THEORY.rglob("*.py")), "theory/ is missing"
    assert not (PACKAGE / "theory").exists()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            upward += [f"{path.relative_to(PACKAGE.parent)}: {n}" for n in names if n.split(".")[0] == "theory"]
        upward += [f"{path.relative_to(PACKAGE.parent)}: {n}" for n in runtime_imports(tree, module_name(path))
                   if n.split(".")[0] == "theory"]
    assert not upward, "norga imports theory/:\n" + "\n".join(upward)


def test_the_wheel_holds_norga_only(monkeypatch):
    """setup.py's package list: norga, its subpackages and norga.shipped; theory/, bench/, studies/ stay out."""
    import runpy

    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(PACKAGE.parent)
    runpy.run_path(str(PACKAGE.parent / "setup.py"))
    packages = captured["packages"]
    assert "norga" in packages and "norga.shipped" in packages and "norga.commands" in packages
    assert all(p == "norga" or p.startswith("norga.") for p in packages), packages
