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

pytestmark = pytest.mark.xdist_group("cm-dropin")  # one worker builds its module fixture once

# the steps whose exit code and JSON shape are the original's, with our documented departures
MATCHING = ["init", "add", "add_check_duplicate", "add_check_strict_duplicate", "add_check_vague", "add_long",
            "add_file_missing", "top", "usage", "undo_not_deprecated", "mark", "undo_feedback", "mark_again",
            "top_used", "undo_feedback_plan", "remove_plan", "remove", "undo_deprecated", "undo_hard",
            "reflect_nothing_new", "privacy_enable", "privacy_deny", "privacy_status", "quickstart",
            "onboard_prompt", "onboard_guided", "context_empty", "context_no_task", "context", "doctor", "info",
            "trauma_bad_regex", "trauma_bad_severity", "trauma_heal_unknown", "unknown_command",
            "unknown_subcommand", "unknown_flag", "stats"]
DEPARTURES = {
    # history is Cerememory's raw journal, which is always there to count
    "privacy_status": {".data.cass.sessionCountsByAgent: object where the original has null"},
    # cm runs on Python over Cerememory, not on Node and Bun over cass
    "info": {".data.dependencies.cass.error: missing", ".data.dependencies.node: missing",
             ".data.dependencies.bun: missing"},
}
# where the original printed text for a usage error, ours prints an envelope under --json (the same exit)
USAGE_ERRORS = ("context_no_task", "unknown_command", "unknown_subcommand", "unknown_flag")


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
    """Our answers to the recorded steps, in order, in one home, outside a git repository (as
    they were recorded)."""
    runs: dict[str, Run] = {}
    rule = ""
    for name, argv in STEPS:
        args = [a.replace("{R}", rule) for a in argv if a != "--json"]
        runs[name] = run = served(*args, json_="--json" in argv, cwd=served.home.parent)
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
    if name in USAGE_ERRORS:
        assert ref["stdout"] == "" and ref["stderr"].startswith("error: ")
        assert ours["error"]["message"] == ref["stderr"].removeprefix("error: ")
        assert ours["error"]["code"] == "INVALID_INPUT" and ours["error"]["exitCode"] == ref["exit"] == 1
    elif isinstance(ref["stdout"], dict):
        assert set(shape_gaps(ours, ref["stdout"])) == DEPARTURES.get(name, set()), ours
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
    cm = Served(tmp_path, served.url)  # the same server, so the same privacy record
    assert cm.ok("privacy", "enable", "Gemini")["crossAgent"]["agents"] == ["gemini"]
    never = cm.ok("privacy", "deny", "codex", "--never")["crossAgent"]
    assert never["agents"] == ["gemini"] and never["deniedAgents"] == ["codex"]
    assert cm.ok("privacy", "status")["ingested"]["codex"] is False
    allowed = cm.ok("privacy", "allow", "codex")["crossAgent"]
    assert allowed["agents"] == ["codex", "gemini"] and "deniedAgents" not in allowed


# ---------------------------------------------------------------- values scripts read


def test_values_scripts_read_are_the_originals(scenario: dict[str, Run], served: Served) -> None:
    def data(name: str) -> Any:
        return scenario[name].data

    def ref(name: str) -> Any:
        return recorded(name)["stdout"]["data"]

    assert data("init")["created"] == ref("init")["created"] == ["config.json", "playbook.yaml", "blocked.log",
                                                                 "usage.jsonl"]
    assert [b["lastUsed"] for b in data("top")["bullets"]] == ["Never"] * len(data("top")["bullets"])
    assert data("top_used")["bullets"][0]["lastUsed"] == ref("top_used")["bullets"][0]["lastUsed"] == "just now"
    assert {k: data("usage")[k] for k in ("month", "total")} == {k: ref("usage")[k] for k in ("month", "total")}
    assert data("remove_plan")["plan"]["wouldChange"] == ref("remove_plan")["plan"]["wouldChange"]
    added = data("add")
    assert added["bullet"]["sourceAgents"] == ref("add")["bullet"]["sourceAgents"] == ["unknown"]
    assert added["targetPath"] == str(served.home / "playbook.yaml")  # CASS_MEMORY_HOME: the expanded path
    vague = data("add_check_vague")["validation"]
    assert vague["warnings"] == ref("add_check_vague")["validation"]["warnings"]
    assert vague["suggestions"] == ref("add_check_vague")["validation"]["suggestions"] == {}
    duplicate = data("add_check_duplicate")["validation"]
    assert duplicate["warnings"][0]["type"] == "similarity" and duplicate["suggestions"] == {"category": "testing",
        "reason": "Content keywords suggest 'testing' category"}
    assert [w for w in duplicate["warnings"] if w["type"] != "similarity"] == \
        ref("add_check_duplicate")["validation"]["warnings"]
    strict = scenario["add_check_strict_duplicate"].env["error"]
    assert strict["message"] == recorded("add_check_strict_duplicate")["stdout"]["error"]["message"]
    failed = data("add_file_missing")
    assert failed["failed"][0]["content"] == "[file: missing.json]" and failed["summary"]["failed"] == 1
    assert failed["failed"] == ref("add_file_missing")["failed"]  # Node's words: ENOENT: no such file …
    assert data("add_long")["bullet"]["content"] == ref("add_long")["bullet"]["content"].strip()
    for key in ("expectations", "operatorNote", "soloUser", "inlineFeedbackFormat", "protocol"):
        assert set(data("quickstart")[key]) == set(ref("quickstart")[key])
    assert data("onboard_prompt")["examples"] == ref("onboard_prompt")["examples"]
    guided = data("onboard_guided")
    assert guided["step"] == "guided" and guided["categories"] == ref("onboard_guided")["categories"]
    empty = scenario["context_empty"].env["error"]
    assert {k: empty[k] for k in ("message", "code", "hint", "details")} == \
        {k: recorded("context_empty")["stdout"]["error"][k] for k in ("message", "code", "hint", "details")}
    context = data("context")
    assert context["suggestedCassQueries"] == ref("context")["suggestedCassQueries"]  # 'fix fix' and all
    assert all(q.startswith("cm history '") for q in context["suggestedHistoryQueries"])
    assert context["degraded"]["cass"]["available"] is False and context["degraded"]["cass"]["suggestedFix"]
    doctor = data("doctor")
    ref_doctor = ref("doctor")
    assert [(c["category"], c["item"]) for c in doctor["checks"]][:7] == \
        [(c["category"], c["item"]) for c in ref_doctor["checks"]][:7]
    assert doctor["overallStatus"] in ("healthy", "degraded", "unhealthy")
    assert {"label", "command", "reason", "urgency"} <= set(doctor["recommendedActions"][0])
    assert data("info")["configuration"]["globalPlaybook"]["path"] == str(served.home / "playbook.yaml")


def test_doctor_checks_the_safety_guard(served: Served, tmp_path: Path) -> None:
    cm = Served(tmp_path, served.url)
    (cm.repo / ".claude").mkdir()
    guard = [c for c in cm.ok("doctor")["checks"] if c["item"] == "Safety Guard"]
    assert guard == [{"category": "Trauma System", "item": "Safety Guard", "status": "warn",
                      "message": "Guard NOT installed in .claude/hooks (run 'cm guard --install')"}]
    cm.ok("guard", "--install")
    assert [c["status"] for c in cm.ok("doctor")["checks"] if c["item"] == "Safety Guard"] == ["pass"]
    (cm.repo / ".claude" / "hooks" / "trauma_guard.py").write_text("print('\\u{1f525}')\n")
    broken = cm.ok("doctor")
    assert [c["status"] for c in broken["checks"] if c["item"] == "Safety Guard"] == ["fail"]
    assert broken["overallStatus"] == "unhealthy"


# ---------------------------------------------------------------- exit codes and errors


def test_errors_exit_as_the_originals(scenario: dict[str, Run], served: Served, tmp_path: Path) -> None:
    for name in ("trauma_bad_regex", "trauma_bad_severity"):  # our code is better; the exit is the original's
        error = scenario[name].env["error"]
        assert (error["code"], error["exitCode"], scenario[name].env["command"]) == ("INVALID_INPUT", 1, "trauma")
    healed = scenario["trauma_heal_unknown"].env["error"]
    ref = recorded("trauma_heal_unknown")["stdout"]["error"]
    assert {k: healed[k] for k in ("message", "code", "exitCode", "hint")} == \
        {k: ref[k] for k in ("message", "code", "exitCode", "hint")}
    assert healed["details"]["traumaId"] == "trauma-nope" and healed["details"]["checkedPaths"]
    cm = Served(tmp_path, served.url)
    for name in ("trauma_bad_severity", "trauma_bad_regex"):
        assert scenario[name].env["error"]["message"] == recorded(name)["stdout"]["error"]["message"]
    human = cm("frobnicate", json_=False)  # commander's words, as the original prints them without --json
    assert (human.code, human.stdout, human.stderr) == \
        (1, "", "error: unknown command 'frobnicate'\n(add --help for additional information)\n")
    from cerememory.cm.args import similar_words, usage_message
    from cerememory.cm.cli import LISTED

    assert similar_words("stat", LISTED) == ["stats"] and similar_words("frobnicate", LISTED) == []
    assert usage_message("the following arguments are required: bullet_id") == \
        ("missing required argument 'bulletId'", 1)
    assert cm("context", "task", "--limit", "x").code == 2  # a bad value: the original's own check, exit 2


def test_invalid_trauma_patterns_are_described_in_the_originals_words() -> None:
    from cerememory.cm.errors import CmError
    from cerememory.cm.trauma import compile_pattern

    said = {")": "unmatched parentheses", "[a": "missing terminating ] for character class",  # by 0.2.13 on Bun
            "a**": "nothing to repeat", "\\": "\\ at end of pattern", "[z-a]": "range out of order in character class",
            "a{3,1}": "numbers out of order in {} quantifier", "(?<x)": "invalid group specifier name"}
    for pattern, words in said.items():
        with pytest.raises(CmError) as caught:
            compile_pattern(pattern)
        assert caught.value.message == f"Invalid regex pattern: Invalid regular expression: {words}"


def test_onboard_without_an_action_shows_its_help_as_the_original(capsys: pytest.CaptureFixture[str]) -> None:
    from cerememory.cm.cli import main

    assert main(["onboard"]) == 1  # the original (commander) prints the group's help on stderr, exit 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: cm onboard") and "status" in err and "guided" in err


def test_a_server_that_needs_a_key_or_is_not_running(tmp_path: Path) -> None:
    from tests.conftest import free_port

    server = ServeProcess.serve(tmp_path / "keyed", tmp_path, CEREMEMORY_API_KEYS="right-key")
    try:
        cm = Cm(tmp_path)
        for key in ({}, {"CEREMEMORY_SERVER_API_KEY": "wrong-key"}):
            refused = cm.fails("UNAUTHORIZED", 3, "stats", "--server-url", server.url, **key)
            assert refused["error"]["hint"] and "CEREMEMORY_SERVER_API_KEY" in refused["error"]["recovery"][0]
        bare = server.url.removeprefix("http://")  # no scheme: http is meant
        assert cm("stats", "--server-url", bare, CEREMEMORY_SERVER_API_KEY="right-key").code == 0
    finally:
        server.stop()
    down = cm.fails("SERVER_UNREACHABLE", 5, "stats", "--server-url", f"localhost:{free_port()}")
    assert "cerememory serve" in down["error"]["hint"]


def test_program_level_verbose_reaches_why(served: Served, tmp_path: Path) -> None:
    cm = Served(tmp_path, served.url)
    events = [{"type": "helpful", "timestamp": f"2026-01-{day:02d}T00:00:00.000Z"} for day in range(1, 13)]
    book = tmp_path / "book.json"
    book.write_text(json.dumps({"bullets": [{"id": "b-verbose1-aaaaaa", "category": "general", "feedbackEvents": events,
                                             "content": "Read the migration guide before a major upgrade"}]}))
    cm.ok("playbook", "import", str(book))
    shown = [len(cm.ok(*args)["feedbackHistory"]) for args in (("why", "b-verbose1-aaaaaa"),
                                                                ("why", "b-verbose1-aaaaaa", "--verbose"),
                                                                ("--verbose", "why", "b-verbose1-aaaaaa"))]
    assert shown == [8, 12, 12]


# ---------------------------------------------------------------- human output


def test_human_output_is_concise_and_coloured_only_when_asked(served: Served, tmp_path: Path) -> None:
    cm = Served(tmp_path, served.url)
    added = cm("add", "Check the changelog before bumping a pinned dependency", json_=False)
    assert added.code == 0 and added.stdout.startswith("✓ Added bullet b-") and added.stdout.count("\n") == 1
    listed = cm("playbook", "list", json_=False).stdout
    rules = len(cm.ok("playbook", "list")["bullets"])
    assert listed.startswith(f"PLAYBOOK RULES ({rules}):") and listed.count("\n") == 2 * rules + 4
    doctor = cm("doctor", json_=False).stdout
    assert "Global Storage (~/.cass-memory)\n  ! Structure: " in doctor and "Overall: degraded" in doctor
    for command in (("top",), ("stats",), ("privacy", "status"), ("trauma", "list"), ("usage",), ("quickstart",)):
        text = cm(*command, json_=False).stdout
        assert text.strip() and not text.startswith("cm ") and "\033[" not in text, command  # not a YAML dump
    assert "\033[32m✓\033[0m" in cm("add", "Pin the toolchain version in CI configs", "--color", json_=False).stdout
    assert "\033[" not in cm("add", "Pin the node version in CI configs", "--color", "--no-color", json_=False).stdout


def test_fixtures_were_recorded_from_the_original() -> None:
    """The recorded envelopes are the original's (version 0.2.13), not ours."""
    for name, _ in STEPS:
        out = recorded(name)["stdout"]
        if isinstance(out, dict):
            assert out["metadata"]["version"] == "0.2.13" and "storage" not in out["metadata"], name
    assert sys.executable and subprocess  # the scenario runs ours as a subprocess
