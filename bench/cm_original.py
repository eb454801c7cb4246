"""cm beside the original cass_memory_system `cm` (0.2.13, TypeScript on Bun), same machine, same
run, same 200-rule playbook: each command of a set is run by the original, then by ours
(embedded, a fresh process opening the data dir), then by ours against a running server,
interleaved run by run so machine load hits all alike. Semantic search off in both.

    python bench/cm_original.py --original "bun run /path/to/cass_memory_system/src/cm.ts"
    python bench/cm.py --original "…"     # the same, after cm.py's own measurements

`--original` (or CM_ORIGINAL) is a command that runs the original; without one the report says the
build is missing. Targets (issue 18): embedded `cm context` no slower than the original, every
other embedded command <= 1.2x. Writes bench/results/cm_original.md and cm_original.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS_DIR, LoadMonitor, env_line, environment, md_table, ms_stats, now, verdict  # noqa: E402

RULES = 200
TASK = "fix the auth token timeout bug in the session refresh handler"
VERBS = ["check", "validate", "log", "retry", "cache", "refresh", "pin", "test", "document", "lint", "profile"]
NOUNS = ["auth token", "session", "migration", "timeout", "database pool", "api client", "config", "build",
         "handler", "queue", "schema", "fixture", "dependency", "cache key", "request id", "bug report"]
WHEN = ["before deploying", "after a refactor", "when tests are flaky", "in CI", "before merging"]
# (label, arguments; {R} is a rule id), each a command scripts and agents run
COMMANDS: list[tuple[str, list[str]]] = [
    ("context", ["context", TASK, "--json"]),
    ("stats", ["stats", "--json"]),
    ("top", ["top", "--json"]),
    ("playbook list", ["playbook", "list", "--json"]),
    ("similar", ["similar", "auth token refresh", "--json"]),
    ("playbook get", ["playbook", "get", "{R}", "--json"]),
    ("why", ["why", "{R}", "--json"]),
    ("mark", ["mark", "{R}", "--helpful", "--json"]),
]


def playbook_yaml(path: Path) -> str:
    """The same 200 rules for both, in the reference's playbook format; returns one rule's id."""
    from cerememory.cm.bullets import new_bullet
    from cerememory.cm.playbook import dump_yaml, empty_playbook

    rng = random.Random(7)
    bullets = [new_bullet(f"Always {rng.choice(VERBS)} the {rng.choice(NOUNS)} {rng.choice(WHEN)} (rule {n})",
                          rng.choice(["testing", "security", "debugging", "workflow"]), state="active",
                          sourceSessions=["bench"]) for n in range(RULES)]
    path.write_text(dump_yaml({**empty_playbook(), "bullets": bullets}), encoding="utf-8")
    return str(bullets[0]["id"])


def run(command: list[str], env: dict[str, str], cwd: Path) -> float:
    return timed(command, env, cwd)[0]


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and its threads). On a shared
    machine the CPU time moves far less than the wall time with the other processes' load."""
    started = now()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = now() - started
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            out.seek(0)
            err.seek(0)
            raise RuntimeError(f"{shlex.join(command[:6])} failed ({code}): {out.read()[-400:]!r}"
                               f" {err.read()[-400:]!r}")
    return elapsed, usage.ru_utime + usage.ru_stime


def environments(workdir: Path) -> tuple[dict[str, str], dict[str, str]]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CEREMEMORY_", "CASS_", "CM_", "ANTHROPIC_", "OPENAI_", "CLAUDE"))
            and k != "PYTHONDONTWRITEBYTECODE"}  # an installed cm runs from compiled bytecode
    original = {**base, "HOME": str(workdir / "original-home"), "NO_COLOR": "1"}
    ours = {**base, "HOME": str(workdir / "ours-home"), "CASS_MEMORY_HOME": str(workdir / "ours-home" / "cm"),
            "CEREMEMORY_CONFIG": str(workdir / "none.toml"), "CEREMEMORY_EMBED__SEMANTIC": "off",
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "NO_COLOR": "1"}
    for env in (original, ours):
        Path(env["HOME"]).mkdir(parents=True)
    return original, ours


def side_by_side(original_cmd: str | None, runs: int) -> dict:
    """The measurements, or `{missing: why}` when no build of the original is given."""
    if not original_cmd:
        return {"missing": "no build of the original: pass --original '<command>' or set CM_ORIGINAL"}
    original = shlex.split(original_cmd)
    ours = [sys.executable, "-m", "cerememory.cm.cli"]
    workdir = Path(tempfile.mkdtemp(prefix="cm-vs-original-"))
    monitor = LoadMonitor()
    server = None
    try:
        orig_env, ours_env = environments(workdir)
        book = workdir / "playbook.yaml"
        rule = playbook_yaml(book)
        run(original + ["init", "--json"], orig_env, workdir)
        config = Path(orig_env["HOME"]) / ".cass-memory" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "semanticSearchEnabled": False}))
        run(original + ["playbook", "import", str(book), "--json"], orig_env, workdir)
        served_env = {**ours_env, "CASS_MEMORY_HOME": str(workdir / "served-home")}  # a data dir of its own
        for env in (ours_env, served_env):
            run(ours + ["init", "--json"], env, workdir)
            run(ours + ["playbook", "import", str(book), "--json"], env, workdir)
        from cm import start_server

        server, url = start_server(Path(served_env["CASS_MEMORY_HOME"]) / "cerememory", served_env, workdir)
        served_env["CEREMEMORY_SERVER_URL"] = url
        times: dict[str, dict[str, list[float]]] = {label: {"original": [], "embedded": [], "server": []}
                                                    for label, _ in COMMANDS}
        cpu: dict[str, dict[str, list[float]]] = {label: {"original": [], "embedded": []} for label, _ in COMMANDS}
        for n in range(runs + 1):  # the first round warms the page cache and is not counted
            for label, args in COMMANDS:
                args = [a.replace("{R}", rule) for a in args]
                measured = {"original": timed(original + args, orig_env, workdir),
                            "embedded": timed(ours + args, ours_env, workdir)}
                measured["server"] = timed(ours + args, served_env, workdir)
                if n:
                    for key, (wall, spent) in measured.items():
                        times[label][key].append(wall)
                        if key in cpu[label]:
                            cpu[label][key].append(spent)
        rows = {}
        for label, by in times.items():
            stats = {key: ms_stats(values) for key, values in by.items()}
            used = {key: ms_stats(values)["p50_ms"] for key, values in cpu[label].items()}
            base = stats["original"]["p50_ms"]
            rows[label] = {**stats, "embedded_ratio": stats["embedded"]["p50_ms"] / base,
                           "server_ratio": stats["server"]["p50_ms"] / base,
                           "cpu_p50_ms": used, "embedded_cpu_ratio": used["embedded"] / used["original"]}
        return {"rules": RULES, "runs": runs, "original": original_cmd, "commands": rows,
                "others_cores": monitor.others_cores()}
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)


def report(result: dict) -> str:
    lines = ["# cm beside the original cm (cass_memory_system 0.2.13)", "",
             f"Environment: {env_line(environment())}", ""]
    if "missing" in result:
        return "\n".join([*lines, f"**Not measured:** {result['missing']}.", ""])
    rows = []
    for label, row in result["commands"].items():
        target = 1.0 if label == "context" else 1.2
        used = row.get("cpu_p50_ms") or {}
        rows.append([label, row["original"]["p50_ms"], row["embedded"]["p50_ms"], row["embedded_ratio"],
                     used.get("original", float("nan")), used.get("embedded", float("nan")),
                     row.get("embedded_cpu_ratio", float("nan")), row["server"]["p50_ms"], row["server_ratio"],
                     f"{verdict(row['embedded_ratio'] <= target)} (≤ {target}×)"])
    lines += [f"{result['rules']} rules, {result['runs']} interleaved runs per command, semantic search off; "
              f"original run as `{result['original']}`; other processes kept "
              f"{result['others_cores']:.2f} of the machine's cores busy during the run.", "",
              "Wall time decides the targets; CPU time (user + system, p50) is the work each process did, "
              "which the other processes' load moves far less.", "",
              md_table(["command", "original p50 ms", "ours embedded p50 ms", "embedded / original",
                        "original CPU ms", "embedded CPU ms", "CPU embedded / original",
                        "ours server p50 ms", "server / original", "embedded target"], rows), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--original", default=os.environ.get("CM_ORIGINAL"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result = side_by_side(args.original, args.runs)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "cm_original.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (RESULTS_DIR / "cm_original.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
