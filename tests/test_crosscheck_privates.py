"""No cross-check touches a private name of norga: what a check observes or replaces goes through the methods'
declared hook points (norga/methods/hooks.py), so a refactor of a method's internals cannot silently break it.

The scan parses every module of ``crosscheck/`` and follows what comes from norga: names imported from ``norga``
(modules, classes, functions), names imported from a crosscheck module that itself reaches norga, and every name
assigned, unpacked or passed as an argument from those (within a module and into the functions it calls in other
crosscheck modules). Flagged: ``x._name`` on such an object, ``from norga... import _name``, a private module in a
norga import path, ``getattr`` / ``setattr`` of a private name on one, and any assignment to an attribute of a
norga module, class or function (patching). Reference-side code reaching into the *reference's* privates
(``learner._train``) is not flagged: its objects never come from norga.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

REPO = Path(__file__).resolve().parents[1]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def root_name(node: ast.AST):
    """The Name at the root of an attribute / call / subscript chain (``a.b(c)[0].d`` -> ``a``), or None."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def mentions(node: ast.AST, tainted: Set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in tainted for n in ast.walk(node))


def bound_names(target: ast.AST) -> List[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


class Module:
    """One parsed module: its imports from norga / crosscheck, its functions' parameters, the names it taints."""

    def __init__(self, name: str, source: str):
        self.name, self.tree = name, ast.parse(source)
        self.norga_imports: Set[str] = set()  # names bound directly to norga modules, classes, functions
        self.crosscheck_imports: Dict[str, tuple] = {}  # local name -> (crosscheck module, imported name)
        self.problems: List[str] = []
        self.functions = {f.name: [a.arg for a in f.args.args] for f in ast.walk(self.tree)
                          if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.tainted_params: Set[tuple] = set()  # (function, parameter)
        self.tainted: Set[str] = set()
        self._read_imports()

    def _read_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "norga":
                        self._check_path(alias.name, node.lineno)
                        self.norga_imports.add(alias.asname or "norga")
            elif isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                for alias in node.names:
                    local = alias.asname or alias.name
                    if top == "norga":
                        self._check_path(node.module, node.lineno)
                        if private(alias.name):
                            self.problems.append(f"line {node.lineno}: imports the private {node.module}.{alias.name}")
                        self.norga_imports.add(local)
                    elif top == "crosscheck":
                        self.crosscheck_imports[local] = (node.module, alias.name)

    def _check_path(self, dotted: str, line: int) -> None:
        if any(private(part) for part in dotted.split(".")):
            self.problems.append(f"line {line}: imports the private module {dotted}")

    def propagate(self, norga_reaching: Set[str]) -> bool:
        """Grow ``tainted`` (flow-insensitive, to a fixpoint); True when it grew."""
        before = len(self.tainted) + len(self.tainted_params)
        seeds = set(self.norga_imports) | {local for local, (mod, _) in self.crosscheck_imports.items()
                                           if mod in norga_reaching}
        self.tainted |= seeds | {p for _, p in self.tainted_params}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None \
                    and mentions(node.value, self.tainted):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.tainted |= {n for t in targets if not isinstance(t, ast.Attribute) for n in bound_names(t)}
            elif isinstance(node, ast.withitem) and node.optional_vars is not None \
                    and mentions(node.context_expr, self.tainted):
                self.tainted |= set(bound_names(node.optional_vars))
            elif isinstance(node, (ast.For, ast.comprehension)) and mentions(node.iter, self.tainted):
                self.tainted |= set(bound_names(node.target))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
                params = self.functions[node.func.id]
                for i, arg in enumerate(node.args[:len(params)]):
                    if mentions(arg, self.tainted):
                        self.tainted_params.add((node.func.id, params[i]))
        return len(self.tainted) + len(self.tainted_params) > before

    def outgoing(self):
        """(crosscheck module, function, argument index) of every call passing a tainted argument to an imported
        crosscheck function."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in self.crosscheck_imports:
                module, function = self.crosscheck_imports[node.func.id]
                for i, arg in enumerate(node.args):
                    if mentions(arg, self.tainted):
                        yield module, function, i

    def violations(self) -> List[str]:
        found = list(self.problems)
        for node in ast.walk(self.tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Attribute) and private(node.attr) and root_name(node.value) in self.tainted:
                found.append(f"line {line}: touches {root_name(node.value)}…{node.attr}, a private name of norga")
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                    and isinstance(node.value, ast.Name) and node.value.id in self.norga_imports:
                found.append(f"line {line}: assigns {node.value.id}.{node.attr}, patching norga")
            if isinstance(node, ast.Assign) and self.behaviour(node.value) and any(
                    isinstance(a, ast.Attribute) and root_name(a.value) in self.tainted
                    for target in node.targets for a in ast.walk(target)):
                found.append(f"line {line}: replaces a function of a norga object or module (patching)")
            if isinstance(node, ast.Call) and any(mentions(a, self.tainted) for a in node.args) and any(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and private(a.value) for a in node.args):
                found.append(f"line {line}: passes the private name of a norga object to {ast.unparse(node.func)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args \
                    and node.func.id in ("getattr", "setattr", "delattr") and root_name(node.args[0]) in self.tainted:
                if node.func.id != "getattr" and root_name(node.args[0]) in self.norga_imports:
                    found.append(f"line {line}: {node.func.id} on {root_name(node.args[0])}, patching norga")
                elif any(private(name) for name in self.attribute_names(node.args[1:2])):
                    found.append(f"line {line}: {node.func.id} of a private name on a norga object")
        return found

    def behaviour(self, value: ast.AST) -> bool:
        """Whether an assigned value is code written here (a lambda, or a function or class defined in the module):
        assigning it to a norga object's attribute replaces that object's behaviour."""
        defined = {n.name for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        return any(isinstance(n, ast.Lambda) or (isinstance(n, ast.Name) and n.id in defined)
                   for n in ast.walk(value))

    def attribute_names(self, args) -> List[str]:
        """The names a getattr-like call's second argument can take: the string itself, or the literal strings
        its loop variable runs over; ``["_?"]`` (counted as private) when it cannot tell."""
        if not args:
            return ["_?"]
        arg = args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        if isinstance(arg, ast.Name):
            for node in ast.walk(self.tree):
                if isinstance(node, (ast.For, ast.comprehension)) and bound_names(node.target) == [arg.id] \
                        and isinstance(node.iter, (ast.Tuple, ast.List)) \
                        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
                    return [e.value for e in node.iter.elts]
        return ["_?"]


def scan(sources: Dict[str, str]) -> Dict[str, List[str]]:
    """Module name -> violations, for ``sources`` (module name -> source text), analysed together."""
    modules = {name: Module(name, text) for name, text in sources.items()}
    reaching = {name for name, m in modules.items() if m.norga_imports}
    while True:
        grown = {name for name, m in modules.items()
                 if name not in reaching and any(mod in reaching for mod, _ in m.crosscheck_imports.values())}
        if not grown:
            break
        reaching |= grown
    changed = True
    while changed:
        changed = False
        for m in modules.values():
            changed |= m.propagate(reaching)
            for module, function, i in list(m.outgoing()):
                callee = modules.get(module)
                if callee is not None and function in callee.functions and i < len(callee.functions[function]):
                    key = (function, callee.functions[function][i])
                    if key not in callee.tainted_params:
                        callee.tainted_params.add(key)
                        changed = True
    return {name: m.violations() for name, m in modules.items() if m.violations()}


def crosscheck_sources() -> Dict[str, str]:
    return {module_name(p, REPO): p.read_text() for p in sorted((REPO / "crosscheck").rglob("*.py"))}


def test_no_crosscheck_touches_a_private_name_of_norga():
    sources = crosscheck_sources()
    assert len(sources) > 40, "the scan found too few crosscheck modules"
    found = scan(sources)
    assert not found, "cross-checks reach into norga's privates; use a declared hook (norga/methods/hooks.py):\n" + \
        "\n".join(f"{m}: {v}" for m, vs in found.items() for v in vs)


SIDE = """
from crosscheck.harness.norga_inputs import method_of

def check(weights):
    _, method = method_of("c.yaml", [], weights)
    {body}
"""
INPUTS = ("from norga.methods import build_method\n\n"
          "def method_of(config, overrides, weights):\n    return 1, build_method()\n")


def planted(body: str, extra: str = "") -> Dict[str, List[str]]:
    sources = {"crosscheck.harness.norga_inputs": INPUTS, "crosscheck.m.norga_side": SIDE.format(body=body) + extra}
    return scan(sources)


def test_the_scan_flags_a_private_method_of_a_method_built_by_norga():
    assert "crosscheck.m.norga_side" in planted("method._train_wtp(0, None)")
    assert "crosscheck.m.norga_side" in planted("pools = method.pools\n    pools._data.zero_()")
    assert not planted("method.train_wtp(0, None)")
    assert planted("getattr(method, '_pool')") and planted("getattr(method.c, name)")
    assert not planted("config = {k: getattr(method.c, k) for k in ('lr', 'epochs')}")


def test_the_scan_follows_norga_objects_into_helper_functions():
    helper = "\n\ndef steps(m):\n    return m._draw_orthonormal(0, 1, None)\n"
    assert planted("steps(method)", helper), "a parameter given a norga object carries it"
    assert not planted("steps(object())", helper)


def test_the_scan_flags_imports_and_patches_of_norga_modules():
    source = "import norga.methods.ranpac as ranpac_module\nstage = ranpac_module._SPLIT_STAGE\n"
    assert scan({"crosscheck.m.norga_side": source})
    source = "import norga.methods.adapter_stage as adapter_stage\nadapter_stage.CosineHead = object\n"
    assert scan({"crosscheck.m.norga_side": source})
    source = "from norga.methods.tuna import TUNA\nsetattr(TUNA, 'train_adapter', None)\n"
    assert scan({"crosscheck.m.norga_side": source})
    source = "import norga.methods.slca as s\ns.shifted_samples, s.shuffled_batches = 1, 2\n"
    assert scan({"crosscheck.m.norga_side": source}), "a tuple assignment patches too"
    helper = "def patch(module, name):\n    module.step = lambda: None\n"
    source = "import norga.methods.aper as aper\nfrom crosscheck.h import patch\npatch(aper, 'x')\n"
    assert "crosscheck.h" in scan({"crosscheck.h": helper, "crosscheck.m.norga_side": source})
    source = "from norga.methods.hideprompt import HiDePrompt\ntimer.patch(HiDePrompt, '_train_tii', 'tii')\n"
    assert scan({"crosscheck.m.norga_side": source})
    assert scan({"crosscheck.m.norga_side": "from norga.methods.coda import _orthonormal\n"})
    assert not scan({"crosscheck.m.norga_side": "import norga.methods.ranpac as r\nstage = r.SPLIT_STAGE\n"})


def test_the_reference_sides_own_privates_are_not_flagged():
    reference = ("from crosscheck.harness.reference_cli import reference_args\n\n"
                 "def main():\n    args = reference_args()\n    from models.mos import Learner\n"
                 "    learner = Learner(args)\n    learner._train(None)\n    learner._network.fc = None\n")
    cli = "import sys\n\ndef reference_args():\n    return sys.argv\n"
    timer = "class Timer:\n    def __init__(self):\n        self._stack = []\n\n    def push(self):\n" \
            "        self._stack.append(1)\n"
    assert not scan({"crosscheck.harness.reference_cli": cli, "crosscheck.mos.reference_side": reference,
                     "crosscheck.speed.stage_timer": timer})
