"""How `cm` is put together, checked without storage: every command carries its handler as a
function and reports the reference's envelope name, the program-level flags stay out of the
environment, and the MCP server calls the typed services, never the CLI's handlers or argparse."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from cerememory.cm import cli

CM = Path(cli.__file__).resolve().parent

# one command line per command, alias and playbook action, with the envelope name it reports
SAMPLES = [
    (["init"], "init"), (["starters"], "starters"), (["context", "task"], "context"), (["ctx", "task"], "context"),
    (["history", "q"], "history"), (["ingest"], "ingest"), (["similar", "q"], "similar"),
    (["playbook", "list"], "playbook:list"), (["playbook", "ls"], "playbook:list"),
    (["playbook", "get", "b-1"], "playbook:get"), (["playbook", "add", "x"], "playbook:add"),
    (["playbook", "remove", "b-1"], "playbook:remove"), (["playbook", "rm", "b-1"], "playbook:remove"),
    (["playbook", "export"], "playbook:export"), (["playbook", "import", "f"], "playbook:import"),
    (["playbook", "bootstrap"], "playbook:bootstrap"), (["add", "x"], "playbook:add"),
    (["rm", "b-1"], "playbook:remove"), (["ls"], "playbook:list"), (["mark", "b-1"], "mark"),
    (["undo", "b-1"], "undo"), (["forget", "b-1"], "forget"), (["why", "b-1"], "why"), (["top"], "top"),
    (["stale"], "stale"), (["stats"], "stats"), (["outcome", "success"], "outcome"),
    (["outcome-apply"], "outcome-apply"), (["reflect"], "reflect"), (["ref"], "reflect"),
    (["validate", "r"], "validate"), (["audit"], "audit"), (["project"], "project"),
    (["quickstart"], "quickstart"), (["usage"], "usage"), (["doctor"], "doctor"), (["dr"], "doctor"),
    (["privacy", "status"], "privacy:status"), (["privacy", "allow", "codex"], "privacy:allow"),
    (["onboard", "mark-done"], "onboard:mark-done"), (["trauma", "ls"], "trauma list"),
    (["trauma", "rm", "x"], "trauma remove"), (["trauma", "add", "x"], "trauma add"), (["guard"], "guard"),
    (["serve"], "serve"),
]


@pytest.mark.parametrize(("argv", "name"), SAMPLES)
def test_each_command_carries_a_handler_function_and_the_references_name(argv: list[str], name: str) -> None:
    args = cli.build_parser().parse_args(argv)
    assert (args.handler is None) != (args.run is None)
    assert callable(args.handler or args.run)
    assert cli.command_name(args) == name


def test_commands_are_listed_in_the_documented_order_and_all_sampled() -> None:
    shown = re.findall(r"^    (\S+)(?: \((\S+)\))?  ", cli.build_parser().format_help(), re.M)
    assert [name for name, _ in shown] == list(cli.LISTED)
    aliases = {alias for _, alias in shown if alias}
    assert aliases == {"ctx", "ref", "dr"}
    assert {argv[0] for argv, _ in SAMPLES} == set(cli.LISTED) | aliases


def test_program_flags_reach_the_context_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CASS_MEMORY_VERBOSE", raising=False)
    monkeypatch.delenv("CASS_MEMORY_NO_EMOJI", raising=False)
    before = dict(os.environ)
    rest, flags = cli.split_globals(["project", "--verbose", "--no-emoji", "--json", "--width", "80"], {})
    assert rest == ["project"]
    assert (flags.verbose, flags.no_emoji, flags.json) == (True, True, True)
    assert dict(os.environ) == before
    _, quiet = cli.split_globals(["stats"], {})
    assert (quiet.verbose, quiet.no_emoji) == (False, False)
    _, from_env = cli.split_globals(["stats"], {"CASS_MEMORY_VERBOSE": "1", "CASS_MEMORY_NO_EMOJI": "1"})
    assert (from_env.verbose, from_env.no_emoji) == (True, True)


def test_the_mcp_server_calls_services_not_the_cli() -> None:
    tree = ast.parse((CM / "mcp.py").read_text(encoding="utf-8"))
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {"service_context", "service_feedback", "service_playbook", "service_reflect", "service_info"} <= imported
    assert not {m for m in imported if m.startswith(("cmd_", "cli", "args")) or m == "argparse"}


def _parsers(parser, path=()):
    """(command path, parser) for cm and every command and subcommand under it."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if child.prog.split()[-1] == name:  # an alias leads to the same parser
                    yield from _parsers(child, (*path, name))


def test_help_describes_every_command_and_every_option(capsys) -> None:
    import argparse

    undescribed = []
    for path, parser in _parsers(cli.build_parser()):
        if path and not parser.description:
            undescribed.append(" ".join(path))
        undescribed += [f"{' '.join(path) or 'cm'} {action.option_strings or action.dest}"
                        for action in parser._actions
                        if not action.help and not isinstance(action, argparse._SubParsersAction)]
    assert undescribed == []
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    for line in ("similar           Active rules similar to a text", "--server-url URL", "--insecure",
                 "--json, -j", "--no-color"):
        assert line in shown
    assert cli.main(["similar", "--help"]) == 0
    assert "--threshold THRESHOLD\n                        the least similarity shown, 0 to 1 (default 0.7)" in \
        capsys.readouterr().out
