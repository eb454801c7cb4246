"""The house rules that keep the package changeable, checked over its source (docs/architecture.md):
no module uses another module's private names, and no import cycles, counting imports inside
functions."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cerememory"
GENERATED = PACKAGE / "v1"


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if GENERATED in path.parents:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return out


MODULES = _modules()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privately(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, module names and attributes of self."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


def _imported(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, tree: ast.Module) -> Iterator[tuple[ast.AST, str, str | None]]:
    """(node, imported module, imported name or None) for every import, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _imported(module, path, node)
            for alias in node.names:
                yield node, source, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, None


def test_no_module_uses_another_modules_private_names():
    defined = {name: _defined_privately(tree) for name, (_, tree) in MODULES.items()}
    everywhere = set().union(*defined.values())
    found = []
    for name, (path, tree) in MODULES.items():
        where = path.relative_to(PACKAGE.parent)
        for node, source, imported in _imports(name, path, tree):
            if source.split(".")[0] == "cerememory" and imported and _private(imported):
                found.append(f"{where}:{node.lineno} imports {source}.{imported}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in everywhere
                    and node.attr not in defined[name]
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                found.append(f"{where}:{node.lineno} uses .{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_no_import_cycles_counting_imports_inside_functions():
    edges: dict[str, set[str]] = defaultdict(set)
    for name, (path, tree) in MODULES.items():
        for _, source, imported in _imports(name, path, tree):
            target = f"{source}.{imported}" if imported and f"{source}.{imported}" in MODULES else source
            if target in MODULES and target != name and not name.startswith(target + "."):
                edges[name].add(target)
    assert not _cycles(edges)


# Which modules may import what. ruff's banned-api cannot say this: its per-file ignores lift
# every ban at once, so storage could import tantivy as soon as it may import duckdb.
ALLOWED_ONLY_IN = {
    "duckdb": ("cerememory.storage.duckdb",),
    "_duckdb": ("cerememory.storage.duckdb",),
    "psycopg": ("cerememory.storage.postgres",),
    "psycopg_pool": ("cerememory.storage.postgres",),
    "tantivy": ("cerememory.index",),
    "grpc": ("cerememory.transport", "cerememory.v1"),
    "mcp": ("cerememory.transport", "cerememory.cm.mcp"),
}
CM_MAY_NOT_IMPORT = ("cerememory.engine", "cerememory.stores", "cerememory.index", "cerememory.storage")
# storage.lock: asking which server owns a data directory (cm then talks to it), never opening it
CM_EXCEPTIONS = ("cerememory.storage.files", "cerememory.storage.lock")


def _inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_third_party_engines_stay_in_their_layer():
    found = []
    for name, (path, tree) in MODULES.items():
        for node, source, _ in _imports(name, path, tree):
            top = source.split(".")[0]
            if top in ALLOWED_ONLY_IN and not _inside(name, ALLOWED_ONLY_IN[top]):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {source}")
    assert not found, "\n".join(found)


def test_cm_reaches_memory_only_through_cmp():
    found = []
    for name, (path, tree) in MODULES.items():
        if not _inside(name, ("cerememory.cm",)):
            continue
        for node, source, imported in _imports(name, path, tree):
            target = f"{source}.{imported}" if imported else source
            if _inside(target, CM_MAY_NOT_IMPORT) and not _inside(target, CM_EXCEPTIONS) \
                    and not _inside(source, CM_EXCEPTIONS):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
    assert not found, "\n".join(found)


CONSOLE_MAY_NOT_IMPORT = ("cerememory.engine", "cerememory.stores", "cerememory.index", "cerememory.storage",
                          "cerememory.api")


def test_the_console_reaches_memory_only_through_the_dispatcher():
    found = []
    for name, (path, tree) in MODULES.items():
        if not _inside(name, ("cerememory.console",)):
            continue
        for node, source, imported in _imports(name, path, tree):
            target = f"{source}.{imported}" if imported else source
            if _inside(target, CONSOLE_MAY_NOT_IMPORT) or _inside(source, CONSOLE_MAY_NOT_IMPORT):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
    assert not found, "\n".join(found)
    assert any(_inside(name, ("cerememory.console",)) for name in MODULES)


def test_the_checks_see_what_they_look_for():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "cerememory.engine.facade" in MODULES and "cerememory.cm.cli" in MODULES
