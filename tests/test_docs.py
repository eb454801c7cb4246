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
    count = sum(op.mcp is not None for op in OPERATIONS.values())
    words = {16: "sixteen", 17: "seventeen", 18: "eighteen", 19: "nineteen", 20: "twenty"}
    assert f"with {words.get(count, count)}\ntools (below)" in mcp  # the count the page opens with
    assert f"the {count} tools" in (ROOT / "README.md").read_text()


def test_reindex_is_documented_on_every_surface():
    docs = {name: (ROOT / "docs" / name).read_text() for name in ("http.md", "grpc.md", "mcp.md", "cli.md")}
    assert "`POST /v1/admin/reindex` is the operation `lifecycle.reindex`" in docs["http.md"]
    assert "`Reindex` is `lifecycle.reindex`" in docs["grpc.md"] and "CerememoryService/Reindex" in docs["grpc.md"]
    assert "`lifecycle.reindex`" in docs["mcp.md"] and "`reindex` is `lifecycle.reindex`" in docs["cli.md"]


# ---------------------------------------------------------------- the README's CLI tour, as written


def _tour_lines() -> list[str]:
    """The commands of the README's CLI tour: its bash block, continuation lines joined."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Five-minute tour: the CLI"):]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start:section.index("\n```", start)]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _tour_shell(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment like a new user's: `cerememory` and `cm` on PATH (this checkout's code), a
    fresh HOME with the default data directory, no configuration."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command, module in (("cerememory", "cerememory.cli"), ("cm", "cerememory.cm.cli")):
        wrapper = bin_dir / command
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import sys; from {module} import main; '
                           f'sys.exit(main())" "$@"\n')
        wrapper.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(HOME=str(home), PATH=f"{bin_dir}:{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               CEREMEMORY_EMBED__SEMANTIC="off", CEREMEMORY_PASSPHRASE="tour passphrase",
               CEREMEMORY_ARCHIVE_PASSPHRASE="tour archive passphrase", COLUMNS="200")
    return env, home


def _run_tour(env: dict[str, str], cwd: Path) -> list[tuple[str, str]]:
    """Run every tour line in a shell; returns (line, output) for each; fails on the first error."""
    import json
    import subprocess

    def sh(line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    record_id = None
    outputs = []
    for line in _tour_lines():
        if "<record-id>" in line:
            if record_id is None:
                found = sh('cerememory recall "deploy key" --json')
                record_id = json.loads(found.stdout)["memories"][0]["record"]["id"]
            line = line.replace("<record-id>", record_id)
        run = sh(line)
        assert run.returncode == 0, f"tour line failed: {line}\nstdout: {run.stdout}\nstderr: {run.stderr}"
        assert "Traceback" not in run.stderr, f"{line}\n{run.stderr}"
        outputs.append((line, run.stdout))
    return outputs


def test_readme_tour_runs_in_process(tmp_path):
    env, home = _tour_shell(tmp_path)
    outputs = dict(_run_tour(env, tmp_path))
    assert len(outputs) == len(set(_tour_lines())) >= 28
    assert (home / ".cerememory" / "data").is_dir()  # the default data directory, as the README says
    assert "Monday" in outputs['cerememory recall "when does the key rotate"']


def test_readme_tour_runs_against_the_server_that_owns_the_data(tmp_path):
    """With `cerememory serve` running, every tour command reaches it by itself (no --server-url):
    the data directory's lock names the server, and cm shares that server's memory."""
    import json
    import subprocess
    import sys

    from tests.conftest import ServeProcess, free_port

    env, home = _tour_shell(tmp_path)
    port = free_port()
    server = ServeProcess([sys.executable, "-m", "cerememory", "serve", "--port", str(port), "--log-level",
                           "warning"], env, tmp_path / "server.log", port)
    try:
        outputs = dict(_run_tour(env, tmp_path))
        assert "Monday" in outputs['cerememory recall "when does the key rotate"']
        stats = subprocess.run(["cerememory", "stats", "--json"], env=env, capture_output=True, text=True,
                               timeout=60)
        assert json.loads(stats.stdout)["data_dir"] == str(home / ".cerememory" / "data")
        context = subprocess.run(["cm", "context", "rotate the key", "--json"], env=env,
                                 capture_output=True, text=True, timeout=60)
        assert context.returncode == 0, context.stderr
        answer = json.loads(context.stdout)
        assert answer["metadata"]["storage"] == "server"
        assert "can you rotate the key?" in context.stdout  # the journal turn `cerememory raw-store` wrote
    finally:
        assert server.stop() == 0
