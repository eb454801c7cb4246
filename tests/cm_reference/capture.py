"""Record what cass_memory_system `cm` 0.2.13 answers, as the fixtures tests/test_cm_dropin.py
pins our shapes to. Run by hand beside a build of the original; the tests never need it.

    python tests/cm_reference/capture.py /path/to/original-cm   # a command that runs it

Each step of one scenario (a fresh home, semantic search off) becomes `<name>.json`:
`{argv, exit, stdout (the envelope, or text), stderr}`; `{R}` in an argv is the rule added first.
"""

from __future__ import annotations

import json
import os
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


def main() -> None:
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


if __name__ == "__main__":
    main()
