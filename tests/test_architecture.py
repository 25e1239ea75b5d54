"""The package's architecture, checked on its source so that a regression fails a test.

docs/design.md ("Layers") says imports only point down, the core install (records, formats, io, settings,
graph, metrics) runs on numpy/scipy alone, training and scoring are sibling floors that share code
through models/ rather than through each other, a helper is never imported by its underscore name,
and a 190-line set-up-loop-evaluate-save function is split like a recipe. Each rule below is one test;
its failure message lists every offender as ``file:line: what``.

The checks are plain functions of a root folder, so ``test_checks_report_planted_*`` can run them on a
tiny synthetic package with one planted violation of each kind: those tests prove every check can fail.
"""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
import textwrap
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import networkx as nx
import pytest

SRC_ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE_ROOT = SRC_ROOT / "cheems"

CORE_MODULES = ("cheems.records", "cheems.formats", "cheems.io", "cheems.settings", "cheems.graph",
                "cheems.metrics")
HEAVY_PACKAGES = frozenset({"torch", "transformers", "openai", "matplotlib", "accelerate", "peft", "vllm",
                            "ray", "deepspeed"})
MAX_FUNCTION_LINES = 80
MAX_CLI_FUNCTION_LINES = 40  # cli/ parses flags, calls one library function, prints: more is library work
MAX_MODULE_LINES = 600
GENERATED_FOLDERS = ("migrations",)  # alembic's migration scripts are generated; they may grow long
PACKAGES = ("formats",)  # concepts that have outgrown one module: one module per member, a registry


# --------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Module:
    """One source file of the package; a package's ``__init__.py`` is the module named after the package."""

    name: str  # "cheems.training.trainer"; "cheems.training" for training/__init__.py
    path: Path
    display: str  # "src/cheems/training/trainer.py", for messages
    tree: ast.Module
    is_package: bool

    @property
    def package(self) -> str:
        """The package a relative import in this module starts from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class ImportStmt:
    """One import: ``import a.b`` (names empty), ``from a import x, y``, or ``import_module("a")``."""

    lineno: int
    module: str  # absolute dotted name; relative imports are resolved
    names: tuple[str, ...]  # the from-import's names, "*" included
    text: str  # the statement as written (normalised by ast.unparse)

    def candidates(self) -> list[str]:
        """The dotted names this statement asks for: ``from a import x`` -> a.x (a module or a name in a)."""
        if not self.names:
            return [self.module]
        return [f"{self.module}.{name}" for name in self.names if name != "*"] or [self.module]


def parse_file(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@lru_cache(maxsize=None)
def load_package(package_root: Path) -> dict[str, Module]:
    """Every ``.py`` file under ``package_root`` (a folder named after the package), by module name."""
    shown_from = package_root.parent.parent  # src/cheems/x.py reads as a path from the repository root
    modules = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
        if not all(part.isidentifier() for part in parts):  # __pycache__ holds no .py; odd names are not modules
            continue
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name, path, path.relative_to(shown_from).as_posix(), parse_file(path), is_package)
    return modules


def known_names(modules: dict[str, Module]) -> set[str]:
    """Modules plus every package that holds one (namespace packages have no __init__.py but still count)."""
    known = set(modules)
    for name in modules:
        parts = name.split(".")
        known.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return known


def resolve_relative(module: Module, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def dynamic_import_target(node: ast.Call) -> str | None:
    """``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")`` with a literal name."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
        return first.value
    return None


def imports_of(module: Module) -> list[ImportStmt]:
    """Every import in the module, top-level or nested in a function, class, ``if`` or ``try``."""
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found += [ImportStmt(node.lineno, alias.name, (), ast.unparse(node)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative(module, node.level, node.module)
            found.append(ImportStmt(node.lineno, base, tuple(a.name for a in node.names), ast.unparse(node)))
        elif isinstance(node, ast.Call) and (target := dynamic_import_target(node)):
            found.append(ImportStmt(node.lineno, target, (), ast.unparse(node)))
    return sorted(found, key=lambda stmt: stmt.lineno)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# ------------------------------------------------------------------------------------------- the checks


def runtime_targets(stmt: ImportStmt, modules: dict[str, Module]) -> set[str]:
    """Package modules the statement loads when it runs, including the parent packages Python imports first."""
    loaded = set()
    for candidate in stmt.candidates():
        parts = candidate.split(".")
        loaded.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in modules)
    return loaded


def find_heavy_imports(package_root: Path, core_modules=CORE_MODULES, heavy=HEAVY_PACKAGES) -> list[str]:
    """Imports of a heavy package in a core module, or in a package module a core module reaches.

    Reach follows every import statement (nested ones too: calling that function would load the heavy
    package) and the parent packages Python loads implicitly.
    """
    modules = load_package(package_root)
    offenders = [f"{name}: core module not found under {package_root}"
                 for name in core_modules if not any(within(m, name) for m in modules)]
    came_from: dict[str, str | None] = {m: None for m in modules if any(within(m, c) for c in core_modules)}
    queue = deque(came_from)
    while queue:
        name = queue.popleft()
        for stmt in imports_of(modules[name]):
            for target in sorted(runtime_targets(stmt, modules) - came_from.keys()):
                came_from[target] = name
                queue.append(target)

    def chain(name: str) -> str:
        path = [name]
        while (prev := came_from[path[-1]]) is not None:
            path.append(prev)
        return " -> ".join(reversed(path))

    for name in sorted(came_from):
        module = modules[name]
        for stmt in imports_of(module):
            if stmt.module.partition(".")[0] in heavy:
                via = "" if came_from[name] is None else f"   [not core, but reached: {chain(name)}]"
                offenders.append(f"{module.display}:{stmt.lineno}: {stmt.text}{via}")
    return offenders


PROBE = r"""
import importlib, json, sys
src, names, heavy = sys.argv[1], json.loads(sys.argv[2]), set(json.loads(sys.argv[3]))
sys.path.insert(0, src)
loaded = lambda: {m for m in sys.modules if m.partition(".")[0] in heavy}
report = {"at_start": sorted(loaded()), "new": {}, "errors": {}}
for name in names:
    before = loaded()
    try:
        importlib.import_module(name)
    except Exception as exc:
        report["errors"][name] = f"{type(exc).__name__}: {exc}"
    report["new"][name] = sorted(loaded() - before)
top = sys.modules.get(names[0].partition(".")[0]) if names else None
report["origin"] = getattr(top, "__file__", None)
report["final"] = sorted(loaded())
print(json.dumps(report))
"""


def heavy_modules_after_import(src_root: Path, core_modules=CORE_MODULES, heavy=HEAVY_PACKAGES) -> list[str]:
    """Import the core modules in a fresh interpreter (from ``src_root``) and list the heavy packages loaded."""
    proc = subprocess.run([sys.executable, "-c", PROBE, str(src_root), json.dumps(list(core_modules)),
                           json.dumps(sorted(heavy))], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return [f"the import probe failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    offenders = []
    if report["at_start"]:
        offenders.append(f"loaded before any cheems import (site / .pth?): {', '.join(report['at_start'])}")
    origin = report["origin"]
    if core_modules and (origin is None or not Path(origin).resolve().is_relative_to(src_root.resolve())):
        offenders.append(f"imported the package from {origin}, not from {src_root}")
    offenders += [f"import {name} failed: {error}" for name, error in report["errors"].items()]
    for name, new in report["new"].items():
        if new:
            tops = sorted({m.partition(".")[0] for m in new})
            offenders.append(f"import {name} loads {', '.join(tops)} ({len(new)} modules: {', '.join(new[:5])}"
                             f"{', ...' if len(new) > 5 else ''})")
    if report["final"] and not any(report["new"].values()) and not report["at_start"]:
        offenders.append(f"in sys.modules after the imports: {', '.join(report['final'])}")
    return offenders


def find_forbidden_imports(package_root: Path, importers: str, forbidden: str) -> list[str]:
    """Imports of ``forbidden`` (itself, a submodule, or a name from it) in modules under ``importers``.

    Catches ``import a.b``, ``from a.b.c import x``, ``from a import b``, relative and nested imports.
    """
    offenders = []
    for name, module in load_package(package_root).items():
        if within(name, importers):
            offenders += [f"{module.display}:{stmt.lineno}: {stmt.text}" for stmt in imports_of(module)
                          if any(within(c, forbidden) for c in stmt.candidates())]
    return offenders


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_use(owner: str, name: str, user: str, known: set[str]) -> bool:
    """Whether module ``user`` may not use ``owner.name``.

    A private name in a module is for that module alone; a private module (``pkg/_shared.py``) is for the
    modules of the package that holds it.
    """
    if not is_private(name):
        return False
    if f"{owner}.{name}" in known:
        return not within(user, owner)
    return user != owner


def dotted_chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything that is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def module_bindings(module: Module, top: str, known: set[str]) -> dict[str, str]:
    """Local names an import binds to a package module: ``import cheems.x`` -> {"cheems": "cheems"}, ..."""
    bound = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if within(alias.name, top):  # `import cheems.x` binds cheems; `import cheems.x as m` binds m
                    bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative(module, node.level, node.module)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    return bound


def find_private_imports(package_root: Path) -> list[str]:
    """Underscore names of one module used by another: ``from cheems.x import _name`` and ``x._name``.

    Dunder names (``__version__``) are public. A private module may be used inside its own package.
    """
    modules = load_package(package_root)
    known = known_names(modules)
    top = package_root.name
    offenders = []
    for name, module in modules.items():
        for stmt in imports_of(module):
            if not within(stmt.module, top):
                continue
            for candidate in stmt.candidates():
                parts = candidate.split(".")
                bad = [".".join(parts[: i + 1]) for i in range(1, len(parts))
                       if private_use(".".join(parts[:i]), parts[i], name, known)]
                offenders += [f"{module.display}:{stmt.lineno}: {stmt.text}   [uses {b}]" for b in bad[:1]]
        bound = module_bindings(module, top, known)
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                chain = dotted_chain(node.value)
                if chain and chain[0] in bound:
                    owner = ".".join([bound[chain[0]]] + chain[1:])
                    if owner in known and private_use(owner, node.attr, name, known):
                        offenders.append(f"{module.display}:{node.lineno}: {ast.unparse(node)}   "
                                         f"[uses {owner}.{node.attr}]")
    return offenders


def explicit_targets(stmt: ImportStmt, modules: dict[str, Module]) -> set[str]:
    """Package modules the statement names: ``from a.b import c`` -> a.b.c if that is a module, else a.b.

    The parent packages Python loads implicitly are left out: every module of a package that re-exports
    its submodules would otherwise sit on a cycle through the package's __init__.
    """
    if not stmt.names:
        return {stmt.module} & modules.keys()
    targets = set()
    for name in stmt.names:
        if f"{stmt.module}.{name}" in modules:
            targets.add(f"{stmt.module}.{name}")
        elif stmt.module in modules:
            targets.add(stmt.module)
    return targets


def import_graph(package_root: Path) -> nx.DiGraph:
    """module -> package modules it imports by an explicit statement (nested ones too); edges carry file:line."""
    modules = load_package(package_root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, module in modules.items():
        for stmt in imports_of(module):
            for target in explicit_targets(stmt, modules) - {name}:
                if not graph.has_edge(name, target):
                    graph.add_edge(name, target, where=[])
                graph.edges[name, target]["where"].append(f"{module.display}:{stmt.lineno}: {stmt.text}")
    return graph


def find_import_cycles(package_root: Path, max_cycles_shown: int = 20) -> list[str]:
    """One entry per strongly connected component of the import graph: its cycles and the imports on them."""
    graph = import_graph(package_root)
    offenders = []
    components = sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)
    for component in components:
        sub = graph.subgraph(component)
        cycles = [" -> ".join(c + [c[0]]) for c in itertools.islice(nx.simple_cycles(sub), max_cycles_shown)]
        where = sorted(w for _, _, edge_where in sub.edges(data="where") for w in edge_where)
        offenders.append(f"cycle among {', '.join(component)}:\n      " + "\n      ".join(cycles)
                         + "\n    through the imports:\n      " + "\n      ".join(where))
    return offenders


def function_limit(path: Path, root: Path) -> int:
    """The longest a function may be in ``path``: MAX_CLI_FUNCTION_LINES in a cli/ folder, else MAX_FUNCTION_LINES."""
    return MAX_CLI_FUNCTION_LINES if "cli" in path.relative_to(root).parts[:-1] else MAX_FUNCTION_LINES


def find_long_functions(root: Path) -> list[str]:
    """Functions and methods (nested ones too) under ``root`` longer than their limit (:func:`function_limit`),
    counted from the ``def`` line to the last line; generated migrations aside."""
    offenders = []

    def visit(node: ast.AST, path: Path, qualname: list[str], max_lines: int) -> None:
        for child in ast.iter_child_nodes(node):
            inner = qualname
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = qualname + [child.name]
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = child.end_lineno - child.lineno + 1
                if length > max_lines:
                    offenders.append(f"{path.relative_to(root.parent).as_posix()}:{child.lineno}: "
                                     f"{'.'.join(inner)}() is {length} lines (max {max_lines})")
            visit(child, path, inner, max_lines)

    for path in sorted(root.rglob("*.py")):
        if not any(part in GENERATED_FOLDERS for part in path.relative_to(root).parts):
            visit(parse_file(path), path, [], function_limit(path, root))
    return offenders


def find_long_modules(root: Path, max_lines: int = MAX_MODULE_LINES) -> list[str]:
    """Modules under ``root`` (generated migrations aside) longer than ``max_lines`` lines."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if any(part in GENERATED_FOLDERS for part in path.relative_to(root).parts):
            continue
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > max_lines:
            offenders.append(f"{path.relative_to(root.parent.parent).as_posix()}:1: {n} lines (max {max_lines})")
    return offenders


def find_modules_that_should_be_packages(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Each name of ``packages`` that is a single module under ``root`` instead of a package."""
    offenders = []
    for name in packages:
        if (root / f"{name}.py").exists() or not (root / name / "__init__.py").exists():
            offenders.append(f"{root.name}/{name}:1: must be a package ({root.name}/{name}/__init__.py), "
                             "one module per member")
    return offenders


def module_level_statements(body: list[ast.stmt]):
    """The module's statements, descending into if/try/with/for/match blocks but not into def or class."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for block in ("body", "orelse", "finalbody"):
            yield from module_level_statements(getattr(stmt, block, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield handler
            yield from module_level_statements(handler.body)
        for case in getattr(stmt, "cases", None) or []:
            yield from module_level_statements(case.body)


def module_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names the module binds at module level, and whether a ``from x import *`` makes the set incomplete."""
    names, star = set(), False
    for stmt in module_level_statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Import):
            names.update(a.asname or a.name.partition(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            star |= any(a.name == "*" for a in stmt.names)
            names.update(a.asname or a.name for a in stmt.names if a.name != "*")
        elif isinstance(stmt, ast.ExceptHandler) and stmt.name:
            names.add(stmt.name)
        else:
            targets = {ast.Assign: lambda s: s.targets, ast.AnnAssign: lambda s: [s.target],
                       ast.AugAssign: lambda s: [s.target], ast.For: lambda s: [s.target],
                       ast.AsyncFor: lambda s: [s.target],
                       ast.With: lambda s: [i.optional_vars for i in s.items if i.optional_vars],
                       ast.AsyncWith: lambda s: [i.optional_vars for i in s.items if i.optional_vars]}
            for target in targets.get(type(stmt), lambda s: [])(stmt):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names, star


def declared_all(tree: ast.Module) -> list[tuple[int, list[str] | None]]:
    """Each module-level ``__all__ = / : / +=`` as (line, names); names is None when not a literal of strings."""
    found = []
    for stmt in module_level_statements(tree.body):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and stmt.value is not None:
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError:
                value = None
            ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
            found.append((stmt.lineno, list(value) if ok else None))
    return found


def find_all_problems(package_root: Path) -> list[str]:
    """Modules (other than __main__.py) with no literal ``__all__``, and ``__all__`` names not defined there.

    A name counts as defined when the module assigns, defs, classes or imports it at module level; a package
    __init__ may also list its own submodules.
    """
    modules = load_package(package_root)
    known = known_names(modules)
    offenders = []
    for name, module in modules.items():
        if module.path.name == "__main__.py":
            continue
        declared = declared_all(module.tree)
        if not declared:
            offenders.append(f"{module.display}:1: declares no __all__")
            continue
        defined, star = module_level_names(module.tree)
        seen: set[str] = set()
        for lineno, listed in declared:
            if listed is None:
                offenders.append(f"{module.display}:{lineno}: __all__ is not a literal list/tuple of strings")
                continue
            for public in listed:
                if public in seen:
                    offenders.append(f"{module.display}:{lineno}: __all__ lists {public!r} twice")
                seen.add(public)
                submodule = module.is_package and f"{name}.{public}" in known
                if public not in defined and not submodule and not star:
                    offenders.append(f"{module.display}:{lineno}: __all__ lists {public!r}, "
                                     f"which the module neither defines nor imports")
    return offenders


def report(rule: str, offenders: list[str]) -> str:
    return f"{rule}: {len(offenders)} offender(s)\n  " + "\n  ".join(offenders)


# ------------------------------------------------------------------------------ the rules, on the package


def test_core_modules_import_no_heavy_package_statically():
    """The core install evaluates score files and resolves annotations with numpy/scipy alone (docs/design.md):
    no import statement in records, formats, io, settings, graph or metrics, nor in any package module they
    import (top-level or inside a function), names torch, transformers, openai, matplotlib, accelerate,
    peft, vllm, ray or deepspeed."""
    offenders = find_heavy_imports(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report("heavy imports in the core", offenders))


def test_core_modules_load_no_heavy_package_when_imported():
    """The same rule, as the interpreter sees it: a fresh ``python -c`` that imports the core modules from
    this checkout has none of the heavy packages in ``sys.modules`` afterwards (catches what static parsing
    cannot, e.g. a core dependency that itself pulls in torch)."""
    offenders = heavy_modules_after_import(SRC_ROOT)
    if offenders:
        pytest.fail(report("heavy packages loaded by the core", offenders))


def test_training_does_not_import_scoring():
    """training/ and scoring/ are sibling floors: what both need lives one floor down in models/, so no
    import in training/ (top-level, nested, relative, ``from cheems import scoring``) reaches cheems.scoring."""
    offenders = find_forbidden_imports(PACKAGE_ROOT, "cheems.training", "cheems.scoring")
    if offenders:
        pytest.fail(report("training/ imports scoring/", offenders))


def test_no_module_uses_another_modules_private_names():
    """A helper is never imported by its underscore name from another module (docs/design.md):
    make it public where it belongs, or move it down a floor. Checks ``from cheems.x import _name`` and
    ``x._name`` on an imported cheems module; dunders such as ``__version__`` are public."""
    offenders = find_private_imports(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report("private names used across modules", offenders))


def test_no_import_cycles():
    """Imports only point down (docs/design.md, "Layers"), so the graph module -> package module it imports has no
    cycle. Every explicit import statement counts, nested ones included (a lazy import still ties the two
    floors together); the implicit import of a parent package's __init__ does not."""
    offenders = find_import_cycles(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report("import cycles", offenders))


def test_no_function_longer_than_limit():
    """No function or method in src/ runs past 80 lines, none in cli/ past 40: a function that sets up, loops,
    evaluates and saves is split into small pieces like a torchtune recipe (docs/design.md, "Size")."""
    offenders = find_long_functions(SRC_ROOT)
    if offenders:
        pytest.fail(report("functions longer than their limit", offenders))


def test_no_module_longer_than_limit():
    """No module in src/ (generated migrations aside) runs past 600 lines: a module that big holds several
    concepts, each of which wants its own home (docs/design.md, "Size")."""
    offenders = find_long_modules(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report(f"modules longer than {MAX_MODULE_LINES} lines", offenders))


def test_formats_is_a_package():
    """The readers of each format family live in their own module of the formats package, listed by its
    registry: adding a format is one module and one line."""
    offenders = find_modules_that_should_be_packages(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report("modules that should be packages", offenders))


def test_every_module_declares_a_true_all():
    """Every module but __main__.py says what it exports in a literal ``__all__``, and every name listed
    there is defined or imported in that module, so ``from cheems.x import *`` and the docs stay honest."""
    offenders = find_all_problems(PACKAGE_ROOT)
    if offenders:
        pytest.fail(report("__all__ problems", offenders))


# ----------------------------------------------------- the checks can fail: a tiny package with plants

LONG_BODY = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))  # def + body + return: limit + 1
CLI_BODY = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLI_FUNCTION_LINES - 1))

PLANTED = {
    "torch/__init__.py": '"""A stand-in for torch, so the import probe needs no real one."""\n',
    "cheems/__init__.py": """\
        from cheems.records import Prompt
        __version__ = "0"
        __all__ = ["Prompt", "__version__", "training"]
        """,
    "cheems/__main__.py": "print('no __all__ needed here')\n",
    "cheems/records.py": """\
        __all__ = ["Prompt", "ghost"]
        class Prompt:
            pass
        def _helper():
            return 1
        def lazy():
            import transformers.models
        """,
    "cheems/formats.py": """\
        import os
        from cheems import __version__
        __all__ = ["os", "__version__"]
        """,
    "cheems/io.py": """\
        try:
            import yaml
        except ImportError:
            yaml = None
        __all__ = ["yaml"]
        """,
    "cheems/settings.py": "VALUE = 1\n",
    "cheems/graph.py": """\
        import torch
        __all__ = ["torch"]
        """,
    "cheems/metrics.py": """\
        from cheems.scoring.run import score
        __all__ = ["score"]
        """,
    "cheems/computed.py": """\
        __all__ = sorted(["a"])
        a = 1
        """,
    "cheems/scoring/__init__.py": """\
        from cheems.scoring.run import score
        __all__ = ["score", "run"]
        """,
    "cheems/scoring/_shared.py": "VALUE = 1\n__all__ = ['VALUE']\n",
    "cheems/scoring/run.py": """\
        from cheems.scoring._shared import VALUE
        from cheems.records import Prompt
        __all__ = ["score", "VALUE", "Prompt"]
        def score():
            import openai
        """,
    "cheems/training/__init__.py": "__all__ = []\n",
    "cheems/training/trainer.py": """\
        import importlib
        import cheems.scoring.run
        from cheems import records, scoring
        __all__ = ["train", "records"]
        def train():
            from cheems.scoring.run import score
            from ..scoring import run as r
            return importlib.import_module("cheems.scoring")
        """,
    "cheems/training/loss.py": """\
        import torch
        from cheems.records import _helper
        from cheems import records
        __all__ = ["loss"]
        def loss():
            return records._helper() + _helper()
        """,
    "cheems/models/sequences.py": """\
        from cheems.scoring import _shared
        from cheems import records as r
        __all__ = ["pack"]
        def pack():
            return r.Prompt._private, _shared.VALUE
        """,
    "cheems/curation/__init__.py": "__all__ = []\n",
    "cheems/curation/a.py": """\
        from cheems.curation import b
        __all__ = ["b"]
        """,
    "cheems/curation/b.py": """\
        __all__ = ["f"]
        def f():
            from cheems.curation.a import b
        """,
    "cheems/report.py": "__all__ = ['long_one', 'just_fits', 'Report']\n"
                        + "def long_one():\n" + LONG_BODY + "    return 0\n"
                        + "def just_fits():\n" + LONG_BODY[:-len("    x98 = 98\n")] + "    return 0\n"
                        + "class Report:\n    def render(self):\n"
                        + textwrap.indent(LONG_BODY, "    ") + "        return 0\n",
    "cheems/cli/__init__.py": "__all__ = ['command', 'fits']\n"
                              + "def command():\n" + CLI_BODY + "    return 0\n"
                              + "def fits():\n" + CLI_BODY[:-len(f"    x{MAX_CLI_FUNCTION_LINES - 2} = "
                                                               f"{MAX_CLI_FUNCTION_LINES - 2}\n")] + "    return 0\n",
    "cheems/big.py": "__all__ = []\n" + "x = 0\n" * MAX_MODULE_LINES,
    "cheems/just_fits.py": "__all__ = []\n" + "x = 0\n" * (MAX_MODULE_LINES - 1),
    "cheems/annotate/migrations/versions/0001_first.py": "__all__ = ['upgrade']\n" + "x = 0\n" * MAX_MODULE_LINES
                                                         + "def upgrade():\n" + LONG_BODY + "    return 0\n",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    """src/ of a tiny package named cheems with one violation of each rule planted (and some look-alikes)."""
    src = tmp_path_factory.mktemp("planted") / "src"
    for rel, text in PLANTED.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return src


def line_of(rel: str, snippet: str) -> str:
    """``src/<rel>:<line>`` of the first line of a planted file that contains ``snippet``."""
    lines = textwrap.dedent(PLANTED[rel]).splitlines()
    return f"src/{rel}:{next(i for i, line in enumerate(lines, 1) if snippet in line)}"


def assert_reported(offenders: list[str], expected: list[str]) -> None:
    """Each expected ``file:line`` opens exactly one offender, and nothing else is reported."""
    starts = [o.split(": ", 1)[0] for o in offenders]
    assert sorted(starts) == sorted(expected), report("reported", offenders)


def test_checks_report_planted_heavy_imports(planted):
    offenders = find_heavy_imports(planted / "cheems")
    assert_reported(offenders, [line_of("cheems/records.py", "import transformers"),
                                line_of("cheems/graph.py", "import torch"),
                                line_of("cheems/scoring/run.py", "import openai")])
    assert "cheems.metrics -> cheems.scoring.run" in next(o for o in offenders if "openai" in o)


def test_checks_report_planted_heavy_package_loaded(planted):
    offenders = heavy_modules_after_import(planted)
    assert len(offenders) == 1 and offenders[0].startswith("import cheems.graph loads torch"), offenders
    assert heavy_modules_after_import(planted, CORE_MODULES[:2]) == []  # records, formats: only lazy imports


def test_checks_report_planted_training_import_of_scoring(planted):
    offenders = find_forbidden_imports(planted / "cheems", "cheems.training", "cheems.scoring")
    trainer = "cheems/training/trainer.py"
    assert_reported(offenders, [line_of(trainer, s) for s in
                                ("import cheems.scoring", "from cheems import records, scoring",
                                 "from cheems.scoring.run", "from ..scoring", "import_module(")])


def test_checks_report_planted_private_names(planted):
    offenders = find_private_imports(planted / "cheems")
    assert_reported(offenders, [line_of("cheems/training/loss.py", "import _helper"),
                                line_of("cheems/training/loss.py", "records._helper()"),
                                line_of("cheems/models/sequences.py", "import _shared")])
    # not reported: __version__, scoring/run.py using its own package's _shared, r.Prompt._private (a class's)


def test_checks_report_planted_import_cycle(planted):
    offenders = find_import_cycles(planted / "cheems")
    assert len(offenders) == 1, offenders
    assert offenders[0].startswith("cycle among cheems.curation.a, cheems.curation.b:"), offenders
    assert line_of("cheems/curation/b.py", "from cheems.curation.a") in offenders[0]
    # not reported: scoring/__init__ re-exporting run, and run's parent package, an implicit import only


def test_checks_report_planted_long_functions(planted):
    offenders = find_long_functions(planted)
    assert_reported(offenders, [line_of("cheems/report.py", "def long_one"),
                                line_of("cheems/report.py", "def render"),
                                line_of("cheems/cli/__init__.py", "def command")])
    assert any(f"Report.render() is {MAX_FUNCTION_LINES + 1} lines" in o for o in offenders), offenders
    assert any(f"command() is {MAX_CLI_FUNCTION_LINES + 1} lines (max {MAX_CLI_FUNCTION_LINES})" in o
               for o in offenders), offenders


def test_checks_report_planted_long_modules(planted):
    offenders = find_long_modules(planted / "cheems")
    assert_reported(offenders, ["src/cheems/big.py:1"])  # not just_fits.py, not the generated migration
    assert f"{MAX_MODULE_LINES + 1} lines" in offenders[0], offenders


def test_checks_report_planted_formats_module(planted):
    offenders = find_modules_that_should_be_packages(planted / "cheems")
    assert len(offenders) == 1 and offenders[0].startswith("cheems/formats:1: must be a package"), offenders


def test_checks_report_planted_all_problems(planted):
    offenders = find_all_problems(planted / "cheems")
    assert_reported(offenders, ["src/cheems/settings.py:1", line_of("cheems/records.py", "__all__"),
                                line_of("cheems/computed.py", "__all__")])
    assert any("'ghost'" in o for o in offenders), offenders
