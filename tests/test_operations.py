"""The operation table is the one declaration: every operation is on every transport it declares
(and nothing else is), every error code is used where it applies, and the protocol layer stays
apart from the engine's layout."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import anyio
import pytest
from fastapi.routing import APIRoute

from cerememory.cmp.dispatch import OPERATIONS, Dispatcher
from cerememory.cmp.errors import GRPC_STATUS, HTTP_STATUS, ErrorCode
from cerememory.transport import grpc_convert, mcp_tools
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.transport.http import create_app
from cerememory.transport.mcp_server import build_mcp_server

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cerememory"


class Nothing:
    """A handler that implements no operation."""

    audit = None


def _sources(*parts: str) -> list[Path]:
    return [p for p in sorted((PACKAGE.joinpath(*parts)).rglob("*.py")) if "v1" not in p.relative_to(PACKAGE).parts]


# ---------------------------------------------------------------- every operation on every transport


def test_every_operation_is_on_every_transport_it_declares():
    app = create_app(Nothing())
    routes = {(method, route.path.replace(":param", "")) for route in app.routes if isinstance(route, APIRoute)
              and route.path.startswith("/v1/") for method in route.methods}
    assert routes == {(op.http.method, op.http.path) for op in OPERATIONS.values()}

    server, _ = build_grpc_server(Nothing())  # refuses to build when servicer and proto differ
    server.stop(None)
    assert {m.name for m in grpc_convert.SERVICE.methods} == {op.rpc for op in OPERATIONS.values()}

    tools = anyio.run(build_mcp_server(Nothing()).list_tools)
    assert {t.name for t in tools} == {op.mcp.name for op in OPERATIONS.values() if op.mcp is not None}
    by_name = {op.mcp.name: op for op in OPERATIONS.values() if op.mcp is not None}
    for tool in tools:
        op = by_name[tool.name]
        assert tool.description == op.mcp.description
        assert tool.annotations.read_only_hint is (not op.audited), tool.name
        assert bool(tool.annotations.destructive_hint) is op.mcp.destructive, tool.name


def test_every_tool_has_its_adapter_and_every_adapter_a_tool():
    adapters = {name for name, value in vars(mcp_tools).items()
                if inspect.isfunction(value) and value.__module__ == mcp_tools.__name__ and not name.startswith("_")}
    assert adapters == {op.mcp.name for op in OPERATIONS.values() if op.mcp is not None}


def test_the_table_is_consistent():
    for op in OPERATIONS.values():
        assert op.request.__name__ == op.request_model and op.response.__name__ == op.response_model, op.name
        assert op.options <= {"sink", "progress"}, op.name
        assert op.audited is op.name.startswith(("encode.", "lifecycle.")), op.name
    assert len({(op.http.method, op.http.path) for op in OPERATIONS.values()}) == len(OPERATIONS)
    assert len({op.rpc for op in OPERATIONS.values()}) == len(OPERATIONS)


def test_call_options_go_only_to_operations_that_take_them():
    with pytest.raises(TypeError, match="takes no sink"):
        Dispatcher(Nothing()).call("introspect.stats", {}, sink=object())  # type: ignore[arg-type]


# ---------------------------------------------------------------- error codes


def _raised_codes() -> set[str]:
    """Every `ErrorCode.X` the package uses as a value: raised, assigned or mapped to, but not a
    key of a lookup table (HTTP_STATUS, EXIT_CODES, ...) nor one side of a comparison."""
    found: set[str] = set()
    for path in _sources():
        tree = ast.parse(path.read_text())
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                skip.update(id(key) for key in node.keys if key is not None)
            elif isinstance(node, ast.Compare):
                skip.update(id(part) for part in (node.left, *node.comparators))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "ErrorCode" and id(node) not in skip):
                found.add(node.attr)
    return found


def test_every_error_code_has_statuses_docs_and_a_place_that_raises_it():
    docs = (ROOT / "docs" / "cmp.md").read_text()
    raised = _raised_codes()
    for code in ErrorCode:
        assert code in HTTP_STATUS and code in GRPC_STATUS, code
        assert f"| `{code.value}` |" in docs, code
        assert code.name in raised, f"{code.value} is raised nowhere: raise it where it applies, or remove it"


# ---------------------------------------------------------------- layering


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module, imported names) of every import in the file, function-level ones too."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, [alias.name for alias in node.names]))
    return out


MINE = [*_sources("cmp"), *_sources("transport"), PACKAGE / "api.py", PACKAGE / "cli.py",
        PACKAGE / "cli_archive.py", PACKAGE / "dynamics" / "scheduler.py"]


def test_protocol_and_transports_do_not_import_the_engine():
    for path in [*_sources("cmp"), *_sources("transport"), PACKAGE / "dynamics" / "scheduler.py"]:
        for module, _ in _imports(path):
            assert not module.startswith("cerememory.engine"), f"{path.name} imports {module}"


def test_no_private_name_is_imported_from_another_module():
    for path in MINE:
        for module, names in _imports(path):
            if module.startswith("cerememory"):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                assert not private, f"{path.name}: from {module} import {private}"


def test_no_import_cycle_counting_function_level_imports():
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in MINE}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, names in _imports(path):
            for candidate in (module, *(f"{module}.{n}" for n in names)):
                if candidate in modules and candidate != name:
                    targets.add(candidate)
        graph[name] = targets
    seen: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        seen[node] = 1
        for nxt in graph[node]:
            assert seen.get(nxt) != 1, "import cycle: " + " -> ".join([*stack[stack.index(nxt):], nxt])
            if nxt not in seen:
                visit(nxt, [*stack, nxt])
        seen[node] = 2

    for name in graph:
        if name not in seen:
            visit(name, [name])
