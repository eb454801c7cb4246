"""cm benchmark: `cm context "<task>" --json` end to end (process start to JSON), embedded and
against a running `cerememory serve`, beside `cerememory recall` of the same query in the same run.

    /work/venv/bin/python bench/cm.py            # playbooks of 50 and 1000 rules, 7 runs each (~5 min)
    /work/venv/bin/python bench/cm.py --quick    # 3 runs each

Measured, side by side (the two commands alternate, so machine load hits both alike):
- embedded, cold: a fresh `python -m cerememory.cm.cli context` process opening the data dir
  in-process, vs a fresh `python -m cerememory recall <task> --json --data-dir` process;
- server: the same two commands with `--server-url` against one `cerememory serve` process
  (the engine stays warm; each command is still a fresh client process);
- for a playbook of 50 and of 1000 rules (the issue's size), over a journal of --journal
  (default 10,000) ingested-style turns
  (history snippets come from it), keyword scoring (`embed.semantic = off`); and, when the embed
  extra is installed, 1000 rules with semantic scoring (`embed.semantic = auto`, rules embedded);
- start-up: wall time of `python -c "import cerememory.cm.cli"` and of the commands' imports,
  and the top modules of `python -X importtime -c "import cerememory.cm.cli"`;
- the Claude Code PreToolUse hook (`cm guard --install`'s script) fed one hook JSON, end to end.

Targets (issue 7): context p50 <= 150 ms against a running server, <= 1 s embedded cold; hook <= 100 ms.

Then, beside the original cass_memory_system `cm` when a build of it is given (`--original
"<command>"` or CM_ORIGINAL; bench/cm_original.py), the same 200-rule playbook command by
command; without one, bench/results/cm_original.md says the build is missing.

Writes bench/results/cm.md and cm.json (and cm_original.md / .json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    REPO_DIR,
    RESULTS_DIR,
    LoadMonitor,
    clean_env,
    env_line,
    environment,
    md_table,
    ms_stats,
    now,
    verdict,
)

from cerememory.embed.local import local_embedder_available  # noqa: E402

TASK = "fix the auth token timeout bug in the session refresh handler"
VERBS = ["check", "validate", "log", "retry", "cache", "refresh", "pin", "test", "document", "lint", "profile"]
NOUNS = ["auth token", "session", "migration", "timeout", "database pool", "api client", "config", "build",
         "handler", "queue", "schema", "fixture", "dependency", "cache key", "request id", "bug report"]
WHEN = ["before deploying", "after a refactor", "when tests are flaky", "in CI", "before merging",
        "when debugging", "on every release", "for each endpoint"]


def seed_rules(data_dir: Path, count: int, start: int, rng: random.Random, semantic: str = "off") -> None:
    """Append `count` playbook rules as cm writes them (procedural records with bullet metadata)."""
    import cerememory
    from cerememory.cm.backend import bullet_request
    from cerememory.cm.bullets import new_bullet

    bullets = []
    for n in range(start, start + count):
        text = f"Always {rng.choice(VERBS)} the {rng.choice(NOUNS)} {rng.choice(WHEN)} (rule {n})"
        bullets.append(new_bullet(text, rng.choice(["testing", "security", "debugging", "workflow"]),
                                  state="active", tags=[rng.choice(NOUNS).split()[0]]))
    with cerememory.open(data_dir, semantic=semantic) as mem:
        for i in range(0, len(bullets), 500):
            mem.dispatch("encode.batch", {"records": [bullet_request(b) for b in bullets[i:i + 500]]})


def seed_journal(data_dir: Path, turns: int, rng: random.Random) -> None:
    """Session turns shaped like `cerememory ingest`'s (agent, workspace, host, source path)."""
    import cerememory

    host = socket.gethostname()
    records = []
    for n in range(turns):
        session = f"claude_code:bench-{n // 20:04d}"
        words = " ".join(rng.choice(NOUNS) for _ in range(6))
        records.append({"session_id": session, "turn_id": str(n % 20), "speaker": "user" if n % 2 == 0 else "assistant",
                        "source": "conversation",
                        "content": {"blocks": [{"modality": "text", "text": f"turn {n}: looked at the {words}"}]},
                        "metadata": {"agent": "claude_code", "workspace": "/home/dev/app", "host": host,
                                     "source_path": f"/home/dev/.claude/projects/-home-dev-app/{session}.jsonl",
                                     "line": n % 20 + 1}})
    with cerememory.open(data_dir, semantic="off") as mem:
        for i in range(0, len(records), 1000):
            mem.store_raw_batch(records[i:i + 1000])


def child_env(home: Path, workdir: Path) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE is dropped: an installed cm runs from compiled bytecode, and
    # recompiling every module on each start would be measured instead
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CEREMEMORY_", "CASS_", "CM_", "MCP_", "ANTHROPIC_", "OPENAI_", "CLAUDE"))
           and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(CASS_MEMORY_HOME=str(home), CEREMEMORY_CONFIG=str(workdir / "none.toml"),
               CEREMEMORY_EMBED__SEMANTIC="off", PYTHONPATH=str(REPO_DIR))
    return env


def timed(command: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> tuple[float, str]:
    started = now()
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, input=stdin, timeout=120)
    elapsed = now() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{command[2:5]} failed ({proc.returncode}): {proc.stdout[-500:]} {proc.stderr[-800:]}")
    return elapsed, proc.stdout


def commands(data_dir: Path, server: str | None) -> tuple[list[str], list[str]]:
    cm = [sys.executable, "-m", "cerememory.cm.cli", "context", TASK, "--json", "--days", "3650"]
    recall = [sys.executable, "-m", "cerememory", "recall", TASK, "--json", "--limit", "10"]
    if server:
        cm += ["--server-url", server]
        recall += ["--server-url", server]
    else:
        recall += ["--data-dir", str(data_dir)]
    return cm, recall


def measure(data_dir: Path, env: dict[str, str], cwd: Path, runs: int, server: str | None) -> dict:
    cm_cmd, recall_cmd = commands(data_dir, server)
    timed(cm_cmd, env, cwd)  # warm the page cache (and the server) once for both
    _, out = timed(recall_cmd, env, cwd)
    cm_times, recall_times = [], []
    sample: dict = {}
    for _ in range(runs):
        elapsed, text = timed(cm_cmd, env, cwd)
        cm_times.append(elapsed)
        sample = json.loads(text)
        recall_times.append(timed(recall_cmd, env, cwd)[0])
    data = sample["data"]
    cm_stats, recall_stats = ms_stats(cm_times), ms_stats(recall_times)
    return {"cm": cm_stats, "recall": recall_stats, "ratio_p50": cm_stats["p50_ms"] / recall_stats["p50_ms"],
            "rules_returned": len(data["relevantBullets"]) + len(data["antiPatterns"]),
            "history_snippets": len(data["historySnippets"]), "storage": sample["metadata"].get("storage"),
            "cm_reported_ms": sample["metadata"]["executionMs"]}


def measure_cell(label: str, data_dir: Path, env: dict[str, str], workdir: Path, runs: int) -> dict:
    """The same commands embedded (cold), then against one `cerememory serve` of the data dir."""
    print(f"{label}: embedded", file=sys.stderr)
    cell = {"embedded": measure(data_dir, env, workdir, runs, None)}
    print(f"{label}: server", file=sys.stderr)
    proc, url = start_server(data_dir, env, workdir)
    try:
        cell["server"] = measure(data_dir, env, workdir, runs, url)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return cell


def start_server(data_dir: Path, env: dict[str, str], workdir: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (workdir / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                             "--port", str(port), "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL,
                            stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readiness", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("server did not start")


def import_times(env: dict[str, str], cwd: Path, runs: int) -> dict:
    """Interpreter start-up alone, `import cerememory.cm.cli`, and what the embedded context needs."""
    out: dict = {}
    for label, code in (("python -c pass", "pass"), ("import cerememory.cm.cli", "import cerememory.cm.cli"),
                        ("import cerememory.transport.light (cm's server client)",
                         "import cerememory.transport.light"),
                        ("import cerememory.transport.client (typed client)", "import cerememory.transport.client"),
                        ("import cerememory.api (embedded)", "import cerememory.api")):
        out[label] = ms_stats([timed([sys.executable, "-c", code], env, cwd)[0] for _ in range(runs)])
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cerememory.cm.cli"], env=env, cwd=cwd,
                          capture_output=True, text=True)
    out["importtime_top"] = _self_time_by_package(proc.stderr)
    return out


def _self_time_by_package(importtime: str) -> list[dict]:
    """`-X importtime` self times summed per top-level package (cerememory split one level down)."""
    totals: dict[str, float] = {}
    for line in importtime.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            parts = match.group(2).split(".")
            key = ".".join(parts[:2]) if parts[0] == "cerememory" else parts[0]
            totals[key] = totals.get(key, 0.0) + int(match.group(1)) / 1000
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:12]
    return [{"module": name, "self_ms": ms} for name, ms in top]


def hook_latency(workdir: Path, env: dict[str, str], runs: int) -> dict:
    from cerememory.cm.trauma import CLAUDE_HOOK

    script = workdir / "trauma_guard.py"
    script.write_text(CLAUDE_HOOK)
    event = json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf /tmp/build && make"}})
    times = [timed([sys.executable, str(script)], env, workdir, stdin=event)[0] for _ in range(runs)]
    return ms_stats(times)


def report(result: dict, runs: int) -> str:
    rows = []
    for size, modes in result["sizes"].items():
        for mode, m in modes.items():
            rows.append([size, mode, m["cm"]["p50_ms"], m["cm"]["p95_ms"], m["recall"]["p50_ms"],
                         m["recall"]["p95_ms"], f"{m['ratio_p50']:.2f}×", m["cm_reported_ms"], m["rules_returned"],
                         m["history_snippets"]])
    keyword = [m for size, m in result["sizes"].items() if "semantic" not in size]
    server_p50 = max(m["server"]["cm"]["p50_ms"] for m in keyword)
    embedded_p50 = max(m["embedded"]["cm"]["p50_ms"] for m in keyword)
    semantic = result["sizes"].get("1000 semantic")
    semantic_line = (f"With semantic scoring (the local model; rules embedded when added): "
                     f"{semantic['server']['cm']['p50_ms']:.0f} ms against a server "
                     f"(**{verdict(semantic['server']['cm']['p50_ms'] <= 150)}**), "
                     f"{semantic['embedded']['cm']['p50_ms']:.0f} ms embedded cold "
                     f"(**{verdict(semantic['embedded']['cm']['p50_ms'] <= 1000)}**)."
                     if semantic else "Semantic scoring was not measured: the embed extra is not installed.")
    imports, hook = result["imports"], result["hook"]
    import_rows = [[k, v["p50_ms"]] for k, v in imports.items() if k != "importtime_top"]
    top_rows = [[t["module"], t["self_ms"]] for t in imports["importtime_top"]]
    return f"""# cm benchmark

`cm context "{TASK}" --json`, end to end (process start to the JSON on stdout), beside
`cerememory recall` of the same text in the same run (the two alternate). Journal:
{result['journal']} turns in {result['journal'] // 20} sessions; keyword scoring (`embed.semantic = off`) except
the "semantic" rows (`embed.semantic = auto` with the local model; the rules embedded when added);
{runs} runs per cell after one warm-up. "cm reported" is the envelope's `metadata.executionMs`
(from argument parsing to the envelope: it includes importing and opening the storage path, which
cm does lazily, but not the interpreter start-up and cm's own modules).

Environment: {env_line(result['environment'])}. Other processes kept on average
{result['others_cores']:.2f} cores busy during the run (the machine has {result['environment']['cpus']}).

{md_table(["rules", "mode", "cm p50 ms", "cm p95 ms", "recall p50 ms", "recall p95 ms", "cm / recall (p50)",
           "cm reported ms", "rules returned", "history snippets"], rows)}

Targets (issue 7): context p50 ≤ 150 ms against a running server — worst keyword p50 here
{server_p50:.0f} ms: **{verdict(server_p50 <= 150)}**; ≤ 1 s embedded cold — worst keyword p50 {embedded_p50:.0f} ms:
**{verdict(embedded_p50 <= 1000)}**. {semantic_line} Claude Code hook (stdlib script, one hook JSON on stdin) p50
{hook['p50_ms']:.0f} ms, p95 {hook['p95_ms']:.0f} ms: **{verdict(hook['p50_ms'] <= 100)}** (≤ 100 ms).

## Where the time goes

Wall time of a bare interpreter and of the imports each path needs (p50 of {runs}):

{md_table(["command", "p50 ms"], import_rows)}

Where `python -X importtime -c "import cerememory.cm.cli"` spends its time (self time summed per
package; `cerememory/__init__.py` imports its public names lazily, so the cm CLI module no longer
pulls in the engine — that happens when a command opens storage):

{md_table(["package", "self ms"], top_rows)}

What changed to get here (same machine, commit by commit): cm reads the playbook with
`recall.list` (an inventory op: no ranking, no reconsolidation, bodies decoded straight from
storage) instead of paging `recall.query` with an empty cue; against a server it talks CMP through
`cerememory.transport.light` (the standard library's `http.client`, dicts in and out) instead of
the httpx client with the pydantic models; the semantic blend first probes with a one-hit query,
so keyword-only storage never ships every rule back; raw-journal text search reads whole records
only for the hits it returns; `cerememory.config`, `cerememory.ingest`, `cerememory.dream` and
`cerememory.llm` load their heavy parts on first use; yaml loads only when a playbook file is
read; a listing page is served from the engine's page cache until the next write; the history
search runs in a thread on its own connection while the playbook is listed and scored. The
server process freezes what opening built (`gc.freeze`), so full collections skip it. Before
these changes, at 1000 rules: 846 ms against a server, 1,260 ms embedded cold.

Reading: a `cm context` process pays the interpreter, the imports of its path (the HTTP client
against a server; the engine — DuckDB, tantivy, pydantic models — embedded), and for embedded
also opening the data dir; `cerememory recall` pays the same start-up, so the ratio shows what
cm's own work adds (listing the playbook, scoring, the history query, the trauma registry).

Reproduce: `/work/venv/bin/python bench/cm.py{' --quick' if runs < 7 else ''}`.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--journal", type=int, default=10_000)
    parser.add_argument("--original", default=os.environ.get("CM_ORIGINAL"),
                        help="a command that runs the original cm, for bench/cm_original.py")
    args = parser.parse_args()
    clean_env()
    runs = args.runs or (3 if args.quick else 7)
    rng = random.Random(7)
    workdir = Path(tempfile.mkdtemp(prefix="cm-bench-"))
    home = workdir / "home"
    data_dir = home / "cerememory"
    env = child_env(home, workdir)
    monitor = LoadMonitor()
    result: dict = {"environment": environment(), "runs": runs, "journal": args.journal, "sizes": {}}
    try:
        seed_journal(data_dir, args.journal, rng)
        seeded = 0
        for size in (50, 1000):
            seed_rules(data_dir, size - seeded, seeded, rng)
            seeded = size
            result["sizes"][str(size)] = measure_cell(f"{size} rules", data_dir, env, workdir, runs)
        if local_embedder_available():  # the default when the embed extra is installed
            sem_home = workdir / "semantic-home"
            sem_dir = sem_home / "cerememory"
            sem_env = {**child_env(sem_home, workdir), "CEREMEMORY_EMBED__SEMANTIC": "auto"}
            seed_journal(sem_dir, args.journal, random.Random(7))
            seed_rules(sem_dir, 1000, 0, random.Random(7), semantic="on")
            result["sizes"]["1000 semantic"] = measure_cell("1000 rules, semantic", sem_dir, sem_env, workdir, runs)
        print("imports and hook", file=sys.stderr)
        result["imports"] = import_times(env, workdir, runs)
        result["hook"] = hook_latency(workdir, env, runs)
        result["others_cores"] = monitor.others_cores()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "cm.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result, runs)
    (RESULTS_DIR / "cm.md").write_text(text)
    print(text)
    from cm_original import report as original_report
    from cm_original import side_by_side

    beside = side_by_side(args.original, runs)
    (RESULTS_DIR / "cm_original.json").write_text(json.dumps(beside, indent=2) + "\n")
    text = original_report(beside)
    (RESULTS_DIR / "cm_original.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
