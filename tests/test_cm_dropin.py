"""`cm` as a drop-in for cass_memory_system `cm` 0.2.13: the scenario the original answered in
tests/cm_reference/ (recorded with tests/cm_reference/capture.py) is run through ours, against
a running server, and every step must have the original's exit code and JSON shape; then the
values scripts and agents read, and the behaviour that changes state, step by step."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cm_reference.capture import STEPS
from tests.cm_shapes import recorded, shape_gaps
from tests.conftest import ServeProcess
from tests.test_cm_cli import Cm, Run

# the steps whose exit code and JSON shape are the original's
MATCHING = ["init", "add", "undo_not_deprecated", "mark", "undo_feedback", "mark_again", "top_used",
            "undo_feedback_plan", "remove", "undo_deprecated", "undo_hard", "reflect_nothing_new",
            "privacy_enable", "privacy_deny", "doctor", "stats"]


class Served(Cm):
    """`cm` against one running server (each call is then one short process)."""

    def __init__(self, tmp: Path, url: str) -> None:
        super().__init__(tmp)
        self.url = url

    def __call__(self, *args: str, stdin: str | None = None, cwd: Path | None = None, json_: bool = True,
                 **env: str) -> Run:
        return super().__call__(*args, "--server-url", self.url, stdin=stdin, cwd=cwd, json_=json_, **env)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("dropin")
    server = ServeProcess.serve(tmp / "served", tmp)
    try:
        yield Served(tmp / "scenario", server.url)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def scenario(served: Served) -> dict[str, Run]:
    """Our answers to the recorded steps, in order, in one home."""
    runs: dict[str, Run] = {}
    rule = ""
    for name, argv in STEPS:
        args = [a.replace("{R}", rule) for a in argv if a != "--json"]
        runs[name] = run = served(*args, json_="--json" in argv)
        if name == "add":
            rule = run.data["bullet"]["id"]
    return runs


def _stdout(run: Run) -> Any:
    try:
        return json.loads(run.stdout)
    except ValueError:
        return run.stdout


@pytest.mark.parametrize("name", MATCHING)
def test_exit_code_and_json_shape_are_the_originals(scenario: dict[str, Run], name: str) -> None:
    ref = recorded(name)
    run = scenario[name]
    assert run.code == ref["exit"], (run.stdout, run.stderr)
    ours = _stdout(run)
    if isinstance(ref["stdout"], dict):
        assert shape_gaps(ours, ref["stdout"]) == [], ours
        assert ours["command"] == ref["stdout"]["command"]


# ---------------------------------------------------------------- behaviour that changes state


def test_reflect_with_nothing_new_leaves_the_playbook_alone(served: Served, tmp_path: Path) -> None:
    cm = Served(tmp_path, served.url)
    rule = cm.ok("add", "Pin dependency versions in the lock file before a release branch is cut")["bullet"]["id"]
    for _ in range(3):
        cm.ok("mark", rule, "--helpful")
    before = cm.ok("playbook", "get", rule)["bullet"]
    assert before["maturity"] == "established"
    assert cm.ok("reflect") == recorded("reflect_nothing_new")["stdout"]["data"] == {"errors": []}
    after = cm.ok("playbook", "get", rule)["bullet"]
    assert {k: after[k] for k in ("maturity", "state", "updatedAt")} == \
        {k: before[k] for k in ("maturity", "state", "updatedAt")}
    human = cm("reflect", json_=False)
    assert human.code == 0 and human.stdout.strip() == "No new sessions to reflect on."


def test_undo_refuses_a_rule_that_is_not_deprecated(scenario: dict[str, Run]) -> None:
    ref = recorded("undo_not_deprecated")["stdout"]["error"]
    error = scenario["undo_not_deprecated"].env["error"]
    assert {k: error[k] for k in ("code", "exitCode", "hint")} == {k: ref[k] for k in ("code", "exitCode", "hint")}
    assert error["details"]["action"] == "un-deprecate"
    # nothing changed: the next mark still finds a fresh candidate
    assert scenario["mark"].data["newState"] == "candidate"


def test_undo_reports_the_originals_before_and_after(scenario: dict[str, Run], served: Served) -> None:
    feedback = scenario["undo_feedback"].data
    assert feedback["before"]["lastFeedback"]["type"] == "helpful" and feedback["before"]["lastFeedback"]["timestamp"]
    assert feedback["after"] == {"helpfulCount": 0, "harmfulCount": 0, "feedbackEventsCount": 0}
    restored = scenario["undo_deprecated"].data
    ref = recorded("undo_deprecated")["stdout"]["data"]
    assert set(restored["before"]) == set(ref["before"]) >= {"deprecatedAt", "deprecationReason"}
    assert restored["after"] == ref["after"]
    assert scenario["undo_hard"].data["after"] == {"deleted": True}
    plan = scenario["undo_feedback_plan"].data["plan"]
    assert plan["wouldChange"].startswith("Would remove last helpful feedback from ")
    assert plan["path"] == str(served.home / "playbook.yaml") and plan["location"] == "global"


def test_privacy_enable_and_deny_edit_the_allowlist(scenario: dict[str, Run], served: Served,
                                                    tmp_path: Path) -> None:
    ref = recorded("privacy_enable")["stdout"]["data"]["crossAgent"]
    enabled = scenario["privacy_enable"].data["crossAgent"]
    assert enabled["agents"] == ref["agents"] == ["claude", "cursor", "codex", "aider", "pi_agent"]
    denied = scenario["privacy_deny"].data["crossAgent"]
    assert denied["agents"] == recorded("privacy_deny")["stdout"]["data"]["crossAgent"]["agents"]
    assert "deniedAgents" not in denied
    cm = Served(tmp_path, served.url)
    assert cm.ok("privacy", "allow", "Gemini")["crossAgent"]["agents"] == ["gemini"]
    never = cm.ok("privacy", "deny", "codex", "--never")["crossAgent"]
    assert never["agents"] == ["gemini"] and never["deniedAgents"] == ["codex"]
    assert cm.ok("privacy", "status")["ingested"]["codex"] is False
    assert "deniedAgents" not in cm.ok("privacy", "allow", "codex")["crossAgent"]


def test_fixtures_were_recorded_from_the_original() -> None:
    """The recorded envelopes are the original's (version 0.2.13), not ours."""
    for name, _ in STEPS:
        out = recorded(name)["stdout"]
        if isinstance(out, dict):
            assert out["metadata"]["version"] == "0.2.13" and "storage" not in out["metadata"], name
    assert sys.executable and subprocess  # the scenario runs ours as a subprocess
