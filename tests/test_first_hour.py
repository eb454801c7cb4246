"""What a new user meets first, through the real interfaces: `cerememory.open` refuses keywords it
does not know and takes `passphrase=`; a string path works wherever a path is taken; Ctrl-D at
the passphrase prompt is a clear error that leaves nothing behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import cerememory
from cerememory.cmp.errors import CMPError, ErrorCode


def test_open_refuses_an_unknown_keyword(data_dir: Path) -> None:
    with pytest.raises(CMPError) as info:
        cerememory.open(data_dir, bogus_setting=1)
    assert info.value.code is ErrorCode.VALIDATION_ERROR
    assert "bogus_setting" in info.value.message and "passphrase=" in (info.value.hint or "")
    assert not data_dir.exists()  # refused before anything was created


def test_open_takes_the_passphrase_the_hint_names(cli, data_dir: Path) -> None:
    created = cli("init", "--encrypt", "--json", env={"CEREMEMORY_PASSPHRASE": "correct horse"})
    assert created.code == 0, created.stderr
    with pytest.raises(CMPError) as info:
        cerememory.open(data_dir, semantic="off")
    assert "passphrase=" in (info.value.hint or "")
    with cerememory.open(data_dir, semantic="off", passphrase="correct horse") as mem:
        mem.store("kept under lock and key")
        assert mem.stats().total_records == 1


def test_ingest_state_takes_a_string_path(mem, tmp_path: Path) -> None:
    from cerememory.ingest import IngestSettings, ingest, open_state

    with open_state(mem, str(tmp_path / "ingest-state")) as state:
        summary = ingest(mem, state=state, agents=["claude_code"], since=None, dry_run=True, paths=[],
                         settings=IngestSettings())
    assert summary.to_dict()["total"]["turns_ingested"] == 0


def _in_terminal(args: list[str], tmp_path: Path, *, answer_after: bytes | None = None,
                 answer: bytes = b"") -> tuple[int, str]:
    """Run `python -m cerememory ARGS` on a real terminal (a pty), as a user would; when its output
    shows `answer_after`, type `answer`. Returns the exit code and everything it printed."""
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(CEREMEMORY_CONFIG=str(tmp_path / "none.toml"), CEREMEMORY_DATA_DIR=str(tmp_path / "data"),
               CEREMEMORY_EMBED__SEMANTIC="off")
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.execve(sys.executable, [sys.executable, "-m", "cerememory", *args], env)
    output = b""
    if answer_after is not None:
        while answer_after not in output:
            output += os.read(fd, 1024)
        os.write(fd, answer)
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the terminal closed: the child exited
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_end_of_input_at_the_passphrase_prompt_is_a_clear_error(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    code, text = _in_terminal(["init", "--encrypt", "--data-dir", str(vault)], tmp_path,
                              answer_after=b"passphrase", answer=b"\x04")  # Ctrl-D
    assert code == 2, text
    assert "Traceback" not in text and "EOFError" not in text
    assert "no passphrase was given" in text
    assert not vault.exists()


def test_store_without_text_on_a_terminal_says_what_to_give(tmp_path: Path) -> None:
    code, text = _in_terminal(["store"], tmp_path)
    assert code == 2, text
    assert "give the text to store" in text and "--file" in text


def test_store_with_empty_text_says_what_to_give(cli) -> None:
    for args, given in ((["store", "", "--json"], None), (["store", "--json"], ""),
                        (["raw-store", "-", "--session-id", "s", "--json"], " \n")):
        result = cli(*args, input=given)
        assert result.code == 2, result.stderr
        error = result.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and error["message"].startswith("give the text to store")
        assert "--file" in error["details"]["hint"]
    assert cli("stats", "--json").json()["raw_journal_records"] == 0


def test_no_arguments_prints_the_help(cli) -> None:
    result = cli()
    assert result.code == 0
    assert "usage: cerememory" in result.stdout and "store" in result.stdout


def test_plural_and_empty_averages_read_right(cli) -> None:
    record_id = cli("store", "one memory", "--json").json()["record_id"]
    assert cli("forget", record_id, "--confirm").stdout.strip() == "forgot 1 record"
    batch = cli("batch", "-", input='{"text": "another memory"}\n').stdout
    assert batch.strip() == "stored 1 record (0 associations inferred)"
    stats = cli("stats", env={"COLUMNS": "200"}).stdout
    assert "0 (avg fidelity —)" in stats and "avg fidelity 0.00" not in stats


def test_in_process_cli_refuses_the_working_store(cli) -> None:
    stored = cli("store", "scratch note", "--store", "working", "--json")
    assert stored.code == 2
    error = stored.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and "serve" in error["details"]["hint"]
    batch = cli("batch", "-", "--json", input='{"text": "a", "store": "working"}\n')
    assert batch.code == 2
    assert cli("stats", "--json").json()["total_records"] == 0


def test_working_store_through_the_server_lasts_until_it_stops(cli, tmp_path: Path, data_dir: Path) -> None:
    from tests.conftest import ServeProcess

    server = ServeProcess.serve(data_dir, tmp_path)
    try:
        stored = cli("store", "scratch note", "--store", "working", "--json")  # finds the server by itself
        assert stored.code == 0, stored.stderr
        recalled = cli("recall", "scratch", "--json").json()
        assert [m["record"]["store"] for m in recalled["memories"]] == ["working"]
    finally:
        assert server.stop() == 0


def _open_modes(root: Path) -> list[str]:
    """Paths under `root` (and root) that group or others may read, write or enter."""
    import stat

    paths = [root, *root.rglob("*")]
    return [f"{p} {oct(stat.S_IMODE(p.lstat().st_mode))}" for p in paths
            if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077]


def test_a_new_data_directory_is_private(data_dir: Path) -> None:
    with cerememory.open(data_dir, semantic="off") as mem:
        mem.store("nobody else's business")
    assert _open_modes(data_dir) == []


def test_keys_create_on_a_new_directory_makes_it_and_its_new_parents_private(cli, tmp_path: Path) -> None:
    home = tmp_path / "home" / ".cerememory"  # neither exists yet, as on a fresh machine
    created = cli("keys", "create", "--name", "laptop", "--json", data=home / "data")
    assert created.code == 0, created.stderr
    assert _open_modes(tmp_path / "home") == []


def test_opening_makes_an_old_readable_directory_private_and_says_so(data_dir: Path, caplog) -> None:
    with cerememory.open(data_dir, semantic="off") as mem:
        mem.store("written before modes were fixed")
    for path in [data_dir, *data_dir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    with caplog.at_level("WARNING", logger="cerememory"), cerememory.open(data_dir, semantic="off") as mem:
        assert mem.stats().total_records == 1
    assert _open_modes(data_dir) == []
    assert any("readable by other users" in r.getMessage() for r in caplog.records)


def test_the_lock_names_the_owning_server_and_the_cli_falls_back_only_when_it_is_gone(cli, data_dir: Path) -> None:
    from cerememory.api import open_config, owning_server
    from cerememory.config import load_config
    from tests.conftest import free_port

    assert owning_server(data_dir) is None and not data_dir.exists()  # asking creates nothing
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = load_config(None, {"data_dir": str(data_dir), "embed.semantic": "off"})
    with open_config(config, server_url=gone):
        assert owning_server(data_dir) == gone
        result = cli("stats", "--json")
        assert result.code == 4
        assert result.json()["error"]["code"] == "DATA_DIR_LOCKED"
        assert result.json()["error"]["details"]["hint"] == f"talk to the running server instead: --server-url {gone}"
    assert owning_server(data_dir) is None


def test_cm_keeps_its_own_data_dir_when_told_even_with_a_server_running(tmp_path: Path) -> None:
    import json
    import subprocess

    from tests.conftest import ServeProcess, clean_env

    home = tmp_path / "home"
    env = clean_env(tmp_path, HOME=str(home), CASS_MEMORY_HOME=str(home / ".cass-memory"))
    server = ServeProcess.serve(home / ".cerememory" / "data", tmp_path)
    try:
        def cm_storage(**extra: str) -> str:
            run = subprocess.run([sys.executable, "-m", "cerememory.cm.cli", "stats", "--json"],
                                 env={**env, **extra}, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            return str(json.loads(run.stdout)["metadata"]["storage"])

        assert cm_storage() == "server"  # shares the running server by default
        assert cm_storage(CEREMEMORY_DATA_DIR=str(tmp_path / "cm-own")) == "embedded"
    finally:
        assert server.stop() == 0


def test_an_api_key_never_travels_in_plaintext_to_another_machine(cli) -> None:
    from cerememory.transport.client import AsyncClient, Client

    refused = cli("stats", "--server-url", "http://10.1.2.3:8420", "--api-key", "secret", "--json")
    assert refused.code == 2
    error = refused.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and "--insecure" in error["details"]["hint"]
    assert "secret" not in refused.stdout
    with pytest.raises(CMPError):
        Client("http://10.1.2.3:8420", api_key="secret")
    with pytest.raises(CMPError):
        AsyncClient("http://10.1.2.3:8420", api_key="secret")
    Client("http://10.1.2.3:8420", api_key="secret", insecure=True).close()  # said explicitly: allowed
    Client("https://10.1.2.3:8420", api_key="secret").close()
    Client("http://127.0.0.1:8420", api_key="secret").close()
    Client("http://10.1.2.3:8420").close()  # no key, nothing to leak
    from cerememory.transport.grpc_client import GrpcClient

    with pytest.raises(CMPError):
        GrpcClient("10.1.2.3:8421", api_key="secret")  # a plaintext channel
    for allowed in (GrpcClient("10.1.2.3:8421", api_key="secret", insecure=True),
                    GrpcClient("10.1.2.3:8421", api_key="secret", tls_root_cert=b"-----BEGIN CERTIFICATE-----"),
                    GrpcClient("127.0.0.1:8421", api_key="secret"), GrpcClient("10.1.2.3:8421")):
        allowed.close()


def test_keys_create_says_a_keyless_server_stays_open_until_restarted(cli, tmp_path: Path, data_dir: Path) -> None:
    from tests.conftest import ServeProcess

    alone = cli("keys", "create", "--name", "first", "--json")
    assert alone.code == 0 and "note" not in alone.json()
    (data_dir / "api_keys.json").unlink()  # back to no keys: the server below starts open
    server = ServeProcess.serve(data_dir, tmp_path)
    try:
        created = cli("keys", "create", "--name", "laptop", "--json")
        assert created.code == 0, created.stderr
        assert "restarted" in created.json()["note"] and server.url in created.json()["note"]
    finally:
        assert server.stop() == 0


def test_a_record_without_meta_says_so_with_its_status_not_with_words(mem) -> None:
    from cerememory.model import MetaMemory

    mem.store("no reasons given")
    hit = mem.recall("reasons").memories[0]
    assert hit.record.meta.capture_status.value == "unavailable"
    assert hit.record.meta.rationale is None
    old = MetaMemory.model_validate({"capture_status": "unavailable",
                                     "rationale": "no meta-memory was supplied with this record"})
    assert old.rationale is None  # records stored by earlier releases read back the same way
