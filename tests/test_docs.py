"""Docs cannot drift: every operation, error code, setting and CLI command is documented."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
gen = runpy.run_path(str(ROOT / "scripts" / "gen_docs.py"))


def test_generated_reference_sections_are_current():
    assert gen["stale"]() == [], "run `python scripts/gen_docs.py`"


def test_every_operation_error_setting_and_command_is_documented():
    from cerememory.cmp.dispatch import OPERATIONS
    from cerememory.cmp.errors import ErrorCode
    from cerememory.config import SETTINGS

    cmp = (ROOT / "docs" / "cmp.md").read_text()
    assert all(f"`{name}`" in cmp for name in OPERATIONS)
    assert all(f"`{code.value}`" in cmp for code in ErrorCode)
    config = (ROOT / "docs" / "configuration.md").read_text()
    assert all(f"`{s.name}`" in config and s.env in config for s in SETTINGS)
    cli = (ROOT / "docs" / "cli.md").read_text()
    for command in ("store", "batch", "recall", "raw-store", "raw-recall", "timeline", "graph",
                    "associate", "inspect", "forget", "mode", "stats", "reindex", "config", "serve",
                    "mcp", "decay-tick", "forecast", "migrate", "migrate-schema"):
        assert f"### `cerememory {command}`" in cli


def test_readme_names_both_setup_commands():
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/test" in readme and "./scripts/cerememory serve" in readme


def test_decay_plot_is_present():
    assert (ROOT / "docs" / "decay.png").stat().st_size > 10_000


def test_mcp_docs_name_every_operation_without_a_tool():
    from cerememory.cmp.dispatch import OPERATIONS

    mcp = (ROOT / "docs" / "mcp.md").read_text()
    untooled = next(line for line in mcp.split("\n- ") if line.startswith("Operations without a tool"))
    for op in OPERATIONS.values():
        if op.mcp is None:
            assert f"`{op.name}`" in untooled, op.name
        else:
            assert f"| `{op.mcp.name}` |" in mcp, op.mcp.name


def test_reindex_is_documented_on_every_surface():
    docs = {name: (ROOT / "docs" / name).read_text() for name in ("http.md", "grpc.md", "mcp.md", "cli.md")}
    assert "`POST /v1/admin/reindex` is the operation `lifecycle.reindex`" in docs["http.md"]
    assert "`Reindex` is `lifecycle.reindex`" in docs["grpc.md"] and "CerememoryService/Reindex" in docs["grpc.md"]
    assert "`lifecycle.reindex`" in docs["mcp.md"] and "`reindex` is `lifecycle.reindex`" in docs["cli.md"]
