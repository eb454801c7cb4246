"""Record what cass_memory_system `cm` 0.2.13 answers, as the fixtures tests/test_cm_dropin.py
pins our shapes to. Run by hand beside a build of the original; the tests never need it.

    python tests/cm_reference/capture.py /path/to/original-cm   # a command that runs it

Each step of one scenario (a fresh home, semantic search off) becomes `<name>.json`:
`{argv, exit, stdout (the envelope, or text), stderr}`; `{R}` in an argv is the rule added first.

    python tests/cm_reference/capture.py /path/to/original-cm --human

records the human (non --json) output of a second scenario as `human/<name>.json`, its text as
lines, normalised (`normalise`): no colour, no emoji (NO_COLOR, CASS_MEMORY_NO_EMOJI), the home
as /HOME, the rule's id as {R} and dates as {DATE}. Steps marked `history` run with a stub `cass`
that knows no sessions and an LLM key that is never used, so the original reaches its empty states.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
RULE = "Always run the unit tests before committing changes"
STEPS: list[tuple[str, list[str]]] = [
    ("init", ["init", "--json"]),
    ("add", ["add", RULE, "--json"]),
    ("add_check_duplicate", ["playbook", "add", RULE + " now", "--check", "--json"]),
    ("add_check_strict_duplicate", ["playbook", "add", RULE + " now", "--check", "--strict", "--json"]),
    ("add_check_vague", ["playbook", "add", "be careful", "--check", "--json"]),
    ("add_long", ["playbook", "add", "Keep each rule short. " * 800, "--json"]),
    ("add_file_missing", ["playbook", "add", "--file", "missing.json", "--json"]),
    ("top", ["top", "--json"]),
    ("usage", ["usage", "--json"]),
    ("undo_not_deprecated", ["undo", "{R}", "--json"]),
    ("mark", ["mark", "{R}", "--helpful", "--json"]),
    ("undo_feedback", ["undo", "{R}", "--feedback", "--json"]),
    ("mark_again", ["mark", "{R}", "--helpful", "--json"]),
    ("top_used", ["top", "--json"]),
    ("undo_feedback_plan", ["undo", "{R}", "--feedback", "--dry-run", "--json"]),
    ("remove_plan", ["playbook", "remove", "{R}", "--dry-run", "--json"]),
    ("remove", ["playbook", "remove", "{R}", "--json"]),
    ("undo_deprecated", ["undo", "{R}", "--json"]),
    ("undo_hard", ["undo", "{R}", "--hard", "--yes", "--json"]),
    ("reflect_nothing_new", ["reflect", "--json"]),
    ("privacy_enable", ["privacy", "enable", "--json"]),
    ("privacy_deny", ["privacy", "deny", "cursor", "--json"]),
    ("privacy_status", ["privacy", "status", "--json"]),
    ("quickstart", ["quickstart", "--json"]),
    ("onboard_prompt", ["onboard", "prompt", "--json"]),
    ("onboard_guided", ["onboard", "guided", "--json"]),
    ("context_empty", ["context", "", "--json"]),
    ("context_no_task", ["context", "--json"]),
    ("context", ["context", "fix the failing unit tests", "--json"]),
    ("doctor", ["doctor", "--json"]),
    ("info", ["--info", "--json"]),
    ("trauma_bad_regex", ["trauma", "add", "rm -rf (", "--message", "x", "--json"]),
    ("trauma_bad_severity", ["trauma", "add", "rm -rf /", "--severity", "extreme", "--json"]),
    ("trauma_heal_unknown", ["trauma", "heal", "trauma-nope", "--json"]),
    ("unknown_command", ["frobnicate", "--json"]),
    ("unknown_subcommand", ["playbook", "frobnicate", "--json"]),
    ("unknown_flag", ["stats", "--frobnicate", "--json"]),
    ("stats", ["stats", "--json"]),
]


# (name, argv, needs history): the human layouts of why, project, starters, validate, audit, onboard
HUMAN_STEPS: list[tuple[str, list[str], bool]] = [
    ("init", ["init", "--json"], False),
    ("starters", ["starters"], False),
    ("project_empty", ["project"], False),
    ("onboard_status_empty", ["onboard", "status"], False),
    ("onboard_gaps_empty", ["onboard", "gaps"], False),
    ("add", ["add", RULE, "--json"], False),
    ("why_fresh", ["why", "{R}"], False),
    ("mark_helpful", ["mark", "{R}", "--helpful", "--json"], False),
    ("mark_harmful", ["mark", "{R}", "--harmful", "--reason", "caused_bug", "--json"], False),
    ("why", ["why", "{R}"], False),
    ("project", ["project"], False),
    ("project_claude", ["project", "--format", "claude.md"], False),
    ("project_output", ["project", "--output", "AGENTS.md"], False),
    ("validate", ["validate", "Always run the linter before pushing"], False),
    ("audit_no_sessions", ["audit"], True),
    ("audit_trauma_none", ["audit", "--trauma"], True),
    ("onboard_status", ["onboard", "status"], False),
    ("onboard_gaps", ["onboard", "gaps"], False),
    ("onboard_sample_none", ["onboard", "sample"], False),
    ("onboard_prompt", ["onboard", "prompt"], False),
    ("onboard_guided", ["onboard", "guided"], False),
    ("onboard_mark_done", ["onboard", "mark-done", "/tmp/sessions/one.jsonl"], False),
    ("onboard_status_progress", ["onboard", "status"], False),
    ("onboard_reset_unconfirmed", ["onboard", "reset"], False),
    ("onboard_reset", ["onboard", "reset", "--yes"], False),
]
STUB_CASS = """#!/bin/sh
case "$1" in
  --version) echo "cass 0.0.0";;
  timeline) echo '{"groups":{},"total_sessions":0}';;
  search) echo '{"hits":[],"count":0}';;
  *) echo '{}';;
esac
"""


def normalise(text: str, home: str, rule: str) -> list[str]:
    """Human output as lines, with what differs from run to run replaced."""
    text = text.replace(home, "/HOME")
    if rule:
        text = text.replace(rule, "{R}")
    return re.sub(r"\b\d{4}-\d{2}-\d{2}\b", "{DATE}", text).split("\n")


def main() -> None:
    if sys.argv[2:] == ["--human"]:
        return human(shlex.split(sys.argv[1]))
    command = shlex.split(sys.argv[1])
    home = Path(tempfile.mkdtemp(prefix="cm-reference-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASS_", "CM_"))}
    env.update(HOME=str(home), NO_COLOR="1", CASS_MEMORY_NO_EMOJI="1")
    (home / ".cass-memory").mkdir()
    rule = ""
    for name, argv in STEPS:
        argv = [a.replace("{R}", rule) for a in argv]
        proc = subprocess.run(command + argv, capture_output=True, text=True, cwd=home, env=env, timeout=120)
        try:
            out: object = json.loads(proc.stdout)
        except ValueError:
            out = proc.stdout
        if name == "init":  # semantic search off, as in the tests
            config = home / ".cass-memory" / "config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "semanticSearchEnabled": False}))
        if name == "add":
            rule = out["data"]["bullet"]["id"]  # type: ignore[index]
        record = {"argv": argv, "exit": proc.returncode, "stdout": out, "stderr": proc.stderr.strip()[:2000]}
        text = json.dumps(record, indent=2, ensure_ascii=False).replace(str(home), "/HOME")
        (HERE / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        print(f"{name}: exit {proc.returncode}")



def human(command: list[str]) -> None:
    home = Path(tempfile.mkdtemp(prefix="cm-reference-"))
    stub = home / "stub-bin"
    stub.mkdir()
    (stub / "cass").write_text(STUB_CASS)
    (stub / "cass").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASS_", "CM_", "ANTHROPIC_", "OPENAI_"))}
    env.update(HOME=str(home), NO_COLOR="1", CASS_MEMORY_NO_EMOJI="1")
    (home / ".cass-memory").mkdir()
    (HERE / "human").mkdir(exist_ok=True)
    rule = ""
    for name, argv, history in HUMAN_STEPS:
        argv = [a.replace("{R}", rule) for a in argv]
        step_env = {**env, "PATH": f"{stub}:{env['PATH']}", "ANTHROPIC_API_KEY": "unused"} if history else env
        proc = subprocess.run(command + argv, capture_output=True, text=True, cwd=home, env=step_env, timeout=120)
        if name == "init":
            config = home / ".cass-memory" / "config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "semanticSearchEnabled": False}))
        if name == "add":
            rule = json.loads(proc.stdout)["data"]["bullet"]["id"]
        if "--json" in argv:
            continue
        record = {"argv": argv, "exit": proc.returncode, "stdout": normalise(proc.stdout, str(home), rule),
                  "stderr": normalise(proc.stderr.strip(), str(home), rule)}
        text = json.dumps(record, indent=2, ensure_ascii=False).replace(rule or "\0", "{R}")
        (HERE / "human" / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        print(f"human/{name}: exit {proc.returncode}")


if __name__ == "__main__":
    main()
