"""`cm`'s human (non --json) output of `why`, `project`, `starters`, `validate`, `audit` and
`onboard`, line for line against what cass_memory_system `cm` 0.2.13 printed for the same
scenario (tests/cm_reference/human/, recorded by `capture.py --human`): headings, order, wording
and empty states, without colour or emoji. The scenario runs through cm's entry point in this
process, against one server of its own (an empty playbook to start from)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest

from cerememory.cm.cli import main
from tests.cm_reference.capture import HUMAN_STEPS, normalise
from tests.cm_shapes import REFERENCE
from tests.conftest import ServeProcess

pytestmark = pytest.mark.xdist_group("cm-human")

# where ours says otherwise, on purpose: (the original's line, ours)
DEPARTURES: dict[str, list[tuple[str, str]]] = {
    # our own starter playbooks (and one more, typescript)
    "starters": [("• general - Universal engineering practices for day-one value. (5 rules)",
                  "• general - Universal practices for any codebase (5 rules)"),
                 ("• node - Node.js/Express conventions for production services. (4 rules)",
                  "• node - Node.js services and tools (4 rules)"),
                 ("• python - Python API patterns (FastAPI/Django) for reliability. (4 rules)",
                  "• python - Python projects (4 rules)"),
                 ("• react - React/Next.js conventions that avoid common regressions. (4 rules)",
                  "• react - React applications (4 rules)"),
                 ("• rust - Rust service idioms that keep binaries safe and observable. (4 rules)",
                  "• rust - Rust crates (4 rules)\n• typescript - TypeScript projects (4 rules)")],
    # history is Cerememory's raw journal, always there: the advice is the original's for a
    # playbook of that size, not "Install cass first"
    **{name: [("Install cass first to enable historical session analysis", advice)]
       for name, advice in (("onboard_status_empty", "Your playbook is empty! Run `cm onboard guided` to start "
                                                     "extracting rules"),
                            ("onboard_status", "Your playbook has few rules. Run `cm onboard guided` to add more"),
                            ("onboard_status_progress", "Your playbook has few rules. Run `cm onboard guided` to "
                                                        "add more"),
                            ("onboard_guided", "Your playbook has few rules. Run `cm onboard guided` to add more"))},
}


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REFERENCE / "human" / f"{name}.json").read_text(encoding="utf-8"))
    return data


def expected(name: str) -> list[str]:
    text = "\n".join(recorded(name)["stdout"])
    for original, ours in DEPARTURES.get(name, []):
        assert original in text, (name, original)
        text = text.replace(original, ours)
    return text.split("\n")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    out.flush()
    return code, out.buffer.getvalue().decode("utf-8"), err.getvalue()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def human(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, list[str], list[str]]]]:
    """Our answers to the recorded human steps, in order, in one fresh home."""
    tmp = tmp_path_factory.mktemp("cm-human")
    server = ServeProcess.serve(tmp / "served", tmp)
    home = tmp / "home"
    (home / ".cass-memory").mkdir(parents=True)
    runs: dict[str, tuple[int, list[str], list[str]]] = {}
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key in list(os.environ):
                if key.startswith(("CEREMEMORY_", "CASS_", "CM_", "ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX_")):
                    mp.delenv(key)
            mp.setenv("HOME", str(home))
            mp.setenv("NO_COLOR", "1")
            mp.setenv("CASS_MEMORY_NO_EMOJI", "1")
            mp.setenv("CEREMEMORY_CONFIG", str(tmp / "none.toml"))
            mp.chdir(home)
            rule = ""
            for name, argv, history in HUMAN_STEPS:
                if history:
                    mp.setenv("ANTHROPIC_API_KEY", "unused")  # an LLM is there; no session asks it anything
                else:
                    mp.delenv("ANTHROPIC_API_KEY", raising=False)
                code, out, err = _run([a.replace("{R}", rule) for a in argv] + ["--server-url", server.url])
                if name == "add":
                    rule = json.loads(out)["data"]["bullet"]["id"]
                runs[name] = (code, normalise(out, str(home), rule), normalise(err.strip(), str(home), rule))
        yield runs
    finally:
        server.stop()


@pytest.mark.parametrize("name", [name for name, argv, _ in HUMAN_STEPS if "--json" not in argv])
def test_human_output_is_the_originals(human: dict[str, tuple[int, list[str], list[str]]], name: str) -> None:
    code, out, err = human[name]
    assert code == recorded(name)["exit"], (out, err)
    assert out == expected(name)
    if code:  # an error: the original's layout on stderr
        assert err == recorded(name)["stderr"]


def test_emoji_and_plain_icons(human: dict[str, tuple[int, list[str], list[str]]]) -> None:
    """Without CASS_MEMORY_NO_EMOJI the icons are the original's emoji; with it, its plain words."""
    from cerememory.cm.human_pages import why
    from cerememory.cm.human_style import use_emoji

    data = {"bullet": {"id": "b-1", "content": "x", "category": "general", "maturity": "candidate", "score": 1.0,
                       "createdAt": "2026-01-01T00:00:00Z", "daysAgo": 3},
            "reasoning": None, "sourceSessions": [], "evidence": [], "diaryEntries": [],
            "feedbackHistory": [{"type": "helpful", "timestamp": "2026-01-02T00:00:00Z"}],
            "currentStatus": {"helpfulCount": 1, "harmfulCount": 0, "effectiveness": "Moderate"}}
    try:
        use_emoji(True)
        text = why(data)
        assert "  2026-01-02 ✓ helpful" in text
        assert text.endswith("💡 Next: 'cm playbook get b-1' or 'cm mark b-1 --helpful|--harmful --reason \"...\"'")
        use_emoji(False)
        assert "  2026-01-02 [OK] helpful" in why(data) and "\nTip: Next: " in why(data)
    finally:
        use_emoji(True)
    assert human["why"][1][0] == "WHY"


def test_history_is_laid_out_as_the_originals_context_history() -> None:
    """`cm history` (the original has none) prints its context's HISTORY section."""
    from cerememory.cm.human_pages import history
    from cerememory.cm.human_style import use_emoji

    hit = {"agent": "codex", "source_path": "/s/one.jsonl", "snippet": "ran  the\n tests"}
    use_emoji(True)  # whatever a command run before in this process chose
    assert history({"query": "x", "historySnippets": [hit]}).split("\n")[2:] == \
        ["1. 🟢 codex • /s/one.jsonl", '  "ran the tests"']
    try:
        use_emoji(False)
        assert history({"query": "x", "historySnippets": []}).split("\n") == [
            "HISTORY (0)", "─" * 80, "(No relevant history found)",
            "  Tip: Use Claude Code, Cursor, Codex, or PI to build session history."]
        assert history({"query": "x", "historySnippets": [hit]}).split("\n")[2] == "1. codex • /s/one.jsonl"
    finally:
        use_emoji(True)
