"""The PostgreSQL backend on a real PostgreSQL: schema migrations, bad settings, and several
servers sharing one memory (writes seen everywhere, recalls never lost, one leader for the
background work, recovery from a dropped connection, nothing acknowledged lost on kill -9)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.storage.backends import StorageSettings, open_key_store
from cerememory.storage.crypto import Vault
from cerememory.storage.kdf import KdfParams

from .conftest import ServeProcess

WAIT = 30.0  # generous bound for a condition that normally holds within a second


def eventually(check: Callable[[], Any], what: str) -> Any:
    """Poll `check` until it returns something truthy (never asserts how long it took)."""
    deadline = time.monotonic() + WAIT
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT} s: {what}")
        time.sleep(0.05)


def open_pg(data_dir: Path, url: str, namespace: str, **settings: Any) -> cerememory.Memory:
    return cerememory.open(data_dir, semantic="off", storage__backend="postgres", storage__postgres_url=url,
                           storage__namespace=namespace, **settings)


@pytest.fixture
def pair(tmp_path: Path, postgres_url: str, pg_namespace: str) -> Iterator[tuple[cerememory.Memory, cerememory.Memory]]:
    """Two engines, as two servers would hold them, over one memory."""
    with open_pg(tmp_path / "a", postgres_url, pg_namespace) as a, \
            open_pg(tmp_path / "b", postgres_url, pg_namespace) as b:
        yield a, b


def texts(mem: cerememory.Memory, query: str) -> list[str]:
    return [hit.record.content.plain_text() for hit in mem.recall(query, limit=20).memories]


# ---------------------------------------------------------------- one memory, two servers


def test_a_write_on_one_server_is_recalled_on_the_other(pair) -> None:
    a, b = pair
    record_id = a.store("the deploy key rotates every friday").record_id
    assert texts(a, "deploy key") == ["the deploy key rotates every friday"]  # read your writes
    eventually(lambda: texts(b, "deploy key"), "B recalls A's write")
    b.update(record_id, text="the deploy key rotates every monday")
    eventually(lambda: texts(a, "deploy key monday") == ["the deploy key rotates every monday"],
               "A recalls B's new text")
    a.forget([record_id], confirm=True)
    eventually(lambda: not texts(b, "deploy key"), "B no longer recalls what A forgot")


def test_a_vector_written_on_one_server_is_searched_on_the_other(pair) -> None:
    """B reads its vectors (its first vector search) before A writes; A's vector reaches B's
    index through B's follower."""
    a, b = pair

    def nearest(mem: cerememory.Memory, cue: list[float]) -> list[str]:
        return [hit.record.content.plain_text() for hit in mem.recall(embedding=cue, limit=1).memories]

    a.store_batch([{"content": {"blocks": [{"modality": "text", "text": "west", "embedding": [0.0, 0.0, 1.0]}]}}])
    eventually(lambda: nearest(b, [0.0, 0.1, 1.0]) == ["west"], "B searches A's first vector")
    a.store_batch([{"content": {"blocks": [{"modality": "text", "text": "north", "embedding": [1.0, 0.0, 0.0]}]}}])
    eventually(lambda: nearest(b, [1.0, 0.1, 0.0]) == ["north"], "B searches A's later vector")


def test_a_late_read_of_other_servers_changes_never_undoes_a_local_write(pair) -> None:
    """B reads what A changed, then changes the same records itself before applying the read
    (the follower reads outside the writer's lock): the records B changed are read again, so its
    update and its forget stand, and the rest of the read applies."""
    a, b = pair
    kept = a.store("the build cache lives on the nfs share").record_id
    doomed = a.store("the old runner image is debian buster").record_id
    eventually(lambda: texts(b, "build cache") and texts(b, "runner image"), "B has A's records")
    feed, follower = b.engine.core.backend.changes, b.engine.follower
    position = feed.last()
    a.update(kept, text="the build cache lives on the object store")
    a.update(doomed, text="the old runner image is debian bullseye")
    a.store("the deploy window opens at noon")
    changes, complete = feed.since(position)
    assert complete and changes
    batch = follower.read(changes)  # what A wrote, as B read it
    b.update(kept, text="the build cache lives on a local disk")  # B writes after the read...
    b.forget([doomed], confirm=True)
    with b.engine.writer.lock:
        follower.apply(batch)  # ...and applies the read only then
    assert texts(b, "build cache") == ["the build cache lives on a local disk"]
    assert texts(b, "runner image") == [] and uuid.UUID(str(doomed)) not in b.engine.core.records.heads
    assert texts(b, "deploy window") == ["the deploy window opens at noon"]
    eventually(lambda: texts(a, "build cache local disk") and not texts(a, "runner image"), "A sees B's changes")


def test_a_session_written_through_both_servers_is_one_chain(pair) -> None:
    a, b = pair

    def turn(text: str) -> dict[str, Any]:
        return {"content": {"blocks": [{"modality": "text", "text": text}]}, "context": {"session_id": "s-pg"}}

    first = a.store_batch([turn("the kettle whistles at noon")]).results[0].record_id
    eventually(lambda: texts(b, "kettle whistles"), "B recalls A's turn")
    second = b.store_batch([turn("then the tea steeps")])
    assert second.associations_inferred == 2
    assert {x.target_id for x in b.inspect(second.results[0].record_id).associations} == {first}


def test_recalls_on_both_servers_are_all_counted(pair) -> None:
    a, b = pair
    record_id = a.store("the staging database lives on host pg-7").record_id
    eventually(lambda: texts(b, "staging database"), "B sees the record")
    storage = a.engine.options.storage

    def stored_count() -> int:
        a.engine.flush()
        b.engine.flush()
        with psycopg.connect(storage.postgres_url or "") as conn:
            row = conn.execute(f"SELECT access_count FROM {storage.namespace}.records WHERE id = %s",
                               [record_id]).fetchone()
        return int(row[0]) if row else -1

    before = stored_count()
    for _ in range(5):
        a.recall("staging database")
        b.recall("staging database")
    assert stored_count() == before + 10


def test_the_raw_journal_is_shared(pair) -> None:
    a, b = pair
    a.store_raw("we agreed to ship on tuesday", session_id="s1")
    eventually(lambda: b.raw_recall("ship tuesday").records, "B finds A's journal record")


def test_one_server_leads_and_another_takes_over(pair, tmp_path: Path, postgres_url: str, pg_namespace: str) -> None:
    a, b = pair
    eventually(lambda: a.engine.leads, "A, opened first, leads")
    assert not b.engine.core.backend.leads()
    a.close()
    assert eventually(b.engine.core.backend.leads, "B takes the lead once A is gone")


def test_a_dropped_connection_fails_one_request_clearly_then_recovers(pair, postgres_url: str,
                                                                     pg_namespace: str) -> None:
    a, _ = pair
    a.store("before the connection dropped")
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # this memory's connections, no other test's
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                      [f"cerememory {pg_namespace}"])
    try:
        a.store("the first write after")
    except CMPError as exc:
        assert exc.code is ErrorCode.INTERNAL_ERROR and exc.hint and "retry" in exc.hint
    a.store("the second write after")
    assert "the second write after" in texts(a, "second write after")


def test_a_restarted_server_catches_up_from_the_change_log(tmp_path: Path, postgres_url: str,
                                                            pg_namespace: str) -> None:
    """A server that closed cleanly indexes only what others changed while it was away: its
    full-text indexes are brought current from the change log, not rebuilt."""
    with open_pg(tmp_path / "a", postgres_url, pg_namespace) as a:
        kept = a.store("the lighthouse keeper logs the storms").record_id
        doomed = a.store("the ferry timetable changes in winter").record_id
        a.store_raw("user: the harbour closes at nine", session_id="s1")
    with open_pg(tmp_path / "b", postgres_url, pg_namespace) as b:
        b.store("the harbour master owns a red boat")
        b.update(kept, text="the lighthouse keeper logs the tides")
        b.forget([doomed], confirm=True)
        b.store_raw("user: the pier reopens in spring", session_id="s1")
    with open_pg(tmp_path / "a", postgres_url, pg_namespace) as a:
        assert a.engine.indexes.caught_up == ["records", "journal"] and a.engine.repaired == []
        assert texts(a, "red boat") == ["the harbour master owns a red boat"]
        assert texts(a, "lighthouse") == ["the lighthouse keeper logs the tides"]
        assert texts(a, "ferry timetable") == []
        assert a.raw_recall("pier spring").records and a.raw_recall("harbour nine").records


# ---------------------------------------------------------------- schema and settings


def test_migrate_schema_checks_then_applies(cli, postgres_url: str, pg_namespace: str) -> None:
    env = {"CEREMEMORY_STORAGE__BACKEND": "postgres", "CEREMEMORY_STORAGE__POSTGRES_URL": postgres_url,
           "CEREMEMORY_STORAGE__NAMESPACE": pg_namespace}
    check = cli("migrate-schema", "--check", "--json", env=env)
    assert check.code == 1, check.stderr
    assert [m["version"] for m in check.json()["pending"]] == [1, 2, 3]
    applied = cli("migrate-schema", "--json", env=env)
    assert applied.code == 0 and [m["version"] for m in applied.json()["applied"]] == [1, 2, 3]
    again = cli("migrate-schema", "--check", "--json", env=env)
    assert again.code == 0 and again.json()["pending"] == []


def test_a_schema_from_a_newer_release_is_refused_and_left_alone(tmp_path: Path, postgres_url: str,
                                                                  pg_namespace: str) -> None:
    with open_pg(tmp_path / "a", postgres_url, pg_namespace) as mem:
        mem.store("kept")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {pg_namespace}.schema_migrations VALUES (99, 'future', 'x')")
    with pytest.raises(CMPError) as err:
        open_pg(tmp_path / "b", postgres_url, pg_namespace)
    assert err.value.code is ErrorCode.VERSION_MISMATCH and "upgrade" in (err.value.hint or "")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(f"SELECT count(*) FROM {pg_namespace}.records").fetchone() == (1,)


@pytest.mark.parametrize(("url", "code", "words"), [
    ("postgresql://127.0.0.1:1/cerememory", ErrorCode.INTERNAL_ERROR, "cannot connect"),
    ("not a url at all", ErrorCode.VALIDATION_ERROR, "not a PostgreSQL URL"),
])
def test_a_wrong_url_is_a_clear_error(tmp_path: Path, url: str, code: ErrorCode, words: str) -> None:
    with pytest.raises(CMPError) as err:
        open_pg(tmp_path / "d", url, "cerememory")
    assert err.value.code is code and words in err.value.message and err.value.hint


def test_a_wrong_password_is_a_clear_error_that_does_not_echo_it(tmp_path: Path, postgres_url: str) -> None:
    from . import pg

    user, password = pg.password_role(postgres_url)
    right = postgres_url.replace("postgres:@", f"{user}:{password.replace(' ', '%20')}@", 1)
    with psycopg.connect(right) as conn:  # the role is there and its password works
        assert conn.execute("SELECT current_user").fetchone() == (user,)
    wrong = right.replace("the%20right%20password", "not-the-password", 1)
    with pytest.raises(CMPError) as err:
        open_pg(tmp_path / "w", wrong, "cerememory")
    assert err.value.code is ErrorCode.INTERNAL_ERROR and "refused the credentials" in err.value.message
    assert "password" in (err.value.hint or "") and "not-the-password" not in str(err.value.envelope())


def test_a_missing_database_and_a_bad_namespace_are_clear_errors(tmp_path: Path, postgres_url: str) -> None:
    missing = postgres_url.replace("/postgres?", "/no_such_database?")
    with pytest.raises(CMPError, match="does not exist"):
        open_pg(tmp_path / "d", missing, "cerememory")
    with pytest.raises(CMPError, match="namespace") as err:
        open_pg(tmp_path / "d", postgres_url, "Robert'); DROP TABLE")
    assert err.value.code is ErrorCode.VALIDATION_ERROR


def test_namespaces_are_isolated(tmp_path: Path, postgres_url: str, pg_namespace: str) -> None:
    other = pg_namespace + "_x"
    try:
        with open_pg(tmp_path / "a", postgres_url, pg_namespace) as a, \
                open_pg(tmp_path / "b", postgres_url, other) as b:
            a.store("only in the first memory")
            time.sleep(0.5)  # a notification that should not come: give it the chance to
            assert texts(b, "first memory") == []
    finally:
        from . import pg

        pg.drop_namespace(postgres_url, other)


# ---------------------------------------------------------------- real servers


def _serve(tmp_path: Path, name: str, url: str, namespace: str, **env: str) -> ServeProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    return ServeProcess.serve(workdir / "data", workdir, "--log-level", "info", "--log-format", "json",
                              CEREMEMORY_STORAGE__BACKEND="postgres", CEREMEMORY_STORAGE__POSTGRES_URL=url,
                              CEREMEMORY_STORAGE__NAMESPACE=namespace, **env)


def _store(url: str, text: str) -> str:
    response = httpx.post(f"{url}/v1/encode", json={"content": {"blocks": [
        {"modality": "text", "format": "text/plain", "text": text}]}}, timeout=30)
    response.raise_for_status()
    return str(response.json()["record_id"])


def _role(server: ServeProcess) -> str:
    return str(httpx.get(f"{server.url}/readiness", timeout=30).json()["background"])


def test_two_servers_lose_nothing_and_fail_over(tmp_path: Path, postgres_url: str, pg_namespace: str) -> None:
    """Eight clients write to both servers; the leader is killed with SIGKILL in the middle.
    Every write either server acknowledged is there afterwards, and the other server leads."""
    servers = [_serve(tmp_path, "a", postgres_url, pg_namespace), _serve(tmp_path, "b", postgres_url, pg_namespace)]
    try:
        roles = eventually(lambda: sorted(_role(s) for s in servers) == ["leader", "standby"] and
                           [_role(s) for s in servers], "one server leads, the other stands by")
        leader, survivor = servers if roles[0] == "leader" else servers[::-1]
        acknowledged: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(n: int) -> None:
            target = servers[n % 2]
            with httpx.Client(base_url=target.url, timeout=30) as http:
                i = 0
                while not stop.is_set():
                    try:
                        response = http.post("/v1/encode", json={"content": {"blocks": [
                            {"text": f"client {n} note {i} on {uuid.uuid4().hex}"}]}})
                    except httpx.HTTPError:
                        if target is leader:
                            return  # its server is gone
                        continue
                    if response.status_code == 200:
                        with lock:
                            acknowledged.append(str(response.json()["record_id"]))
                    i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        eventually(lambda: len(acknowledged) >= 40, "writes are acknowledged")
        os.kill(leader.proc.pid, signal.SIGKILL)
        leader.proc.wait()
        written = len(acknowledged)
        eventually(lambda: len(acknowledged) >= written + 20, "the survivor keeps acknowledging writes")
        stop.set()
        for thread in threads:
            thread.join()
        eventually(lambda: _role(survivor) == "leader", "the survivor takes the lead")
        with httpx.Client(base_url=survivor.url, timeout=30) as http:
            missing = [i for i in acknowledged if http.get(f"/v1/introspect/record/{i}").status_code != 200]
        assert missing == []
    finally:
        for server in servers:
            server.stop()


# ---------------------------------------------------------------- moving a memory


def test_migrate_moves_a_memory_to_postgres_and_back(cli, data_dir: Path, tmp_path: Path, postgres_url: str,
                                                      pg_namespace: str) -> None:
    with cerememory.open(data_dir, semantic="off") as mem:
        first = mem.store("the release train leaves on thursday").record_id
        mem.store("thursday releases need a changelog",
                  associations=[{"target_id": str(first), "association_type": "semantic", "weight": 0.8}])
        mem.store_raw("user: when is the release?", session_id="s1")
    moved = cli("migrate", "--to", postgres_url, "--namespace", pg_namespace, "--json")
    assert moved.code == 0, moved.stderr
    assert moved.json()["records"] == 2 and moved.json()["raw_records"] == 1
    again = cli("migrate", "--to", postgres_url, "--namespace", pg_namespace, "--json")
    assert again.code == 2 and again.json()["error"]["code"] == "VALIDATION_ERROR"  # never merges
    assert "not empty" in again.json()["error"]["message"]
    with open_pg(tmp_path / "cache", postgres_url, pg_namespace) as shared:
        assert "the release train leaves on thursday" in texts(shared, "release train")
    back = cli("migrate", "--from", postgres_url, "--namespace", pg_namespace, "--json", data=tmp_path / "back")
    assert back.code == 0, back.stderr
    with cerememory.open(tmp_path / "back", semantic="off") as mem:
        assert mem.stats().total_records == 2 and mem.stats().raw_journal_records == 1
        second = [h.record for h in mem.recall("changelog").memories][0]
        assert [a.target_id for a in second.associations] == [first]


# ---------------------------------------------------------------- one audit chain


def test_two_servers_write_one_audit_chain_that_audit_verify_checks(pair, cli, postgres_url: str,
                                                                    pg_namespace: str) -> None:
    a, b = pair
    a.store("audited on A")
    b.store("audited on B")
    a.store("audited on A again")
    env = {"CEREMEMORY_STORAGE__BACKEND": "postgres", "CEREMEMORY_STORAGE__POSTGRES_URL": postgres_url,
           "CEREMEMORY_STORAGE__NAMESPACE": pg_namespace}
    report = cli("audit-verify", "--json", env=env)
    assert report.code == 0, report.stdout
    assert report.json()["ok"] and report.json()["entries"] >= 6  # an intent and an outcome per store
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {pg_namespace}.audit SET line = convert_to(replace(convert_from(line, 'UTF8'), "
                     "'encode', 'forget'), 'UTF8') WHERE seq = 2")
    broken = cli("audit-verify", "--json", env=env)
    assert broken.code == 6 and broken.json()["first_bad_line"] == 2


# ---------------------------------------------------------------- encryption at rest

PASSPHRASE = "one passphrase for every server"
FAST_KDF = KdfParams(time_cost=1, memory_cost_kib=8 * 1024)
CANARY = "zebracanary"


def _table_counts(url: str, namespace: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {table: int(conn.execute(f"SELECT count(*) FROM {namespace}.{table}").fetchone()[0])  # type: ignore[index]
                for table in ("records", "raw_journal", "record_keys", "audit", "changes", "master_key")}


def test_an_encrypted_memory_is_shared_and_forget_erases_its_key(tmp_path: Path, postgres_url: str,
                                                                  pg_namespace: str) -> None:
    """Two servers with the same passphrase read each other's encrypted records; the database
    holds no plaintext; a forgotten record's key row is gone, so its ciphertext opens for no one;
    a wrong passphrase is refused before anything is written."""
    settings = StorageSettings(backend="postgres", postgres_url=postgres_url, namespace=pg_namespace)
    with open_key_store(settings, tmp_path) as store:
        Vault.create(store, PASSPHRASE, FAST_KDF)
    with open_pg(tmp_path / "a", postgres_url, pg_namespace, passphrase=PASSPHRASE) as a, \
            open_pg(tmp_path / "b", postgres_url, pg_namespace, passphrase=PASSPHRASE) as b:
        kept = a.store(f"the {CANARY} grazes at noon", metadata={"note": CANARY}).record_id
        gone = a.store(f"the {CANARY} hides at dusk").record_id
        a.store_raw(f"user: the {CANARY} ships on tuesday", session_id="s1")
        eventually(lambda: texts(b, "grazes noon"), "B finds A's encrypted record through its own index")
        assert b.inspect(kept).metadata["note"] == CANARY
        eventually(lambda: b.raw_recall("ships tuesday").records, "B reads A's encrypted journal record")
        with psycopg.connect(postgres_url) as conn:
            bodies = [bytes(row[0]) for row in conn.execute(
                f"SELECT body FROM {pg_namespace}.records UNION ALL SELECT body FROM {pg_namespace}.raw_journal "
                f"UNION ALL SELECT vec FROM {pg_namespace}.vectors")]
            sealed = {row[0]: bytes(row[1]) for row in conn.execute(f"SELECT id, body FROM {pg_namespace}.records")}
        assert bodies and not any(CANARY.encode() in body for body in bodies)
        b.forget([gone], confirm=True)
        eventually(lambda: not texts(a, "hides dusk"), "A no longer recalls what B forgot")
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(f"SELECT count(*) FROM {pg_namespace}.record_keys WHERE id = %s", [gone]).fetchone()
    assert rows == (0,)
    with open_key_store(settings, tmp_path) as store:
        vault = Vault.unlock(store, PASSPHRASE)
        assert vault is not None
        assert CANARY.encode() in vault.open(kept, sealed[kept])
        with pytest.raises(CMPError) as erased:
            vault.open(gone, sealed[gone])  # the raw row, kept from before the forget
        assert erased.value.code is ErrorCode.RECORD_NOT_FOUND
        Vault.rekey(store, PASSPHRASE, "the next passphrase", FAST_KDF)  # the master key re-wrapped, nothing else
        rekeyed = Vault.unlock(store, "the next passphrase")
        assert rekeyed is not None and CANARY.encode() in rekeyed.open(kept, sealed[kept])
        Vault.rekey(store, "the next passphrase", PASSPHRASE, FAST_KDF)
    before = _table_counts(postgres_url, pg_namespace)
    for passphrase in ("wrong", None):
        with pytest.raises(CMPError) as refused:
            open_pg(tmp_path / "c", postgres_url, pg_namespace, passphrase=passphrase)
        assert refused.value.code is ErrorCode.UNAUTHORIZED and refused.value.hint
    assert _table_counts(postgres_url, pg_namespace) == before


def test_two_encrypted_servers_share_api_keys_and_their_revocation(cli, tmp_path: Path, postgres_url: str,
                                                                   pg_namespace: str) -> None:
    """`init --encrypt` and `keys create` against the shared memory; two real servers with the
    same passphrase (one from the environment, one from a file): a key made once works on both,
    a record written on one is read on the other, a revocation reaches both; a server given the
    wrong passphrase stops with a clear error."""
    env = {"CEREMEMORY_STORAGE__BACKEND": "postgres", "CEREMEMORY_STORAGE__POSTGRES_URL": postgres_url,
           "CEREMEMORY_STORAGE__NAMESPACE": pg_namespace, "CEREMEMORY_PASSPHRASE": PASSPHRASE}
    init = cli("init", "--encrypt", "--json", env=env)
    assert init.code == 0 and init.json()["encrypted"], init.stderr
    created = cli("keys", "create", "--name", "agent", "--json", env=env)
    assert created.code == 0, created.stderr
    auth = {"Authorization": f"Bearer {created.json()['key']}"}
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n")
    servers = [_serve(tmp_path, "a", postgres_url, pg_namespace, CEREMEMORY_PASSPHRASE=PASSPHRASE),
               _serve(tmp_path, "b", postgres_url, pg_namespace, CEREMEMORY_PASSPHRASE_FILE=str(secret))]
    try:
        a, b = (s.url for s in servers)
        written = httpx.post(f"{a}/v1/encode", headers=auth, timeout=30, json={"content": {"blocks": [
            {"modality": "text", "format": "text/plain", "text": f"the {CANARY} sleeps standing"}]}})
        assert written.status_code == 200, written.text
        record = f"/v1/introspect/record/{written.json()['record_id']}"
        read = eventually(lambda: (r := httpx.get(b + record, headers=auth, timeout=30)).status_code == 200 and r,
                          "B reads A's encrypted record with the key made once")
        assert CANARY in read.text
        assert httpx.get(b + record, timeout=30).status_code == 401
        revoked = cli("keys", "revoke", "agent", "--json", env=env)
        assert revoked.code == 0, revoked.stderr
        for url in (a, b):
            eventually(lambda url=url: httpx.get(url + record, headers=auth, timeout=30).status_code == 401,
                       f"{url} refuses the revoked key")
    finally:
        for server in servers:
            server.stop()
    wrong = cli("serve", "--port", "1", env={**env, "CEREMEMORY_PASSPHRASE": "wrong"})
    assert wrong.code == 7 and "UNAUTHORIZED" in wrong.stderr and "CEREMEMORY_PASSPHRASE" in wrong.stderr


def test_migrate_keeps_an_encrypted_memory_encrypted(cli, data_dir: Path, tmp_path: Path, postgres_url: str,
                                                     pg_namespace: str) -> None:
    """An encrypted data directory moves into PostgreSQL and back under the same passphrase, never
    as plaintext; a forget after the move erases the record's key row; without the passphrase the
    move is refused before PostgreSQL is touched."""
    Vault.create(data_dir, PASSPHRASE, FAST_KDF)
    with cerememory.open(data_dir, semantic="off", passphrase=PASSPHRASE) as mem:
        kept = mem.store(f"the {CANARY} grazes at noon").record_id
        gone = mem.store(f"the {CANARY} hides at dusk").record_id
        mem.store_raw(f"user: the {CANARY} ships on tuesday", session_id="s1")
    refused = cli("migrate", "--to", postgres_url, "--namespace", pg_namespace, "--json")
    assert refused.code == 7 and refused.json()["error"]["code"] == "UNAUTHORIZED"
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [pg_namespace]).fetchone() == (0,)
    env = {"CEREMEMORY_PASSPHRASE": PASSPHRASE}
    moved = cli("migrate", "--to", postgres_url, "--namespace", pg_namespace, "--json", env=env)
    assert moved.code == 0, moved.stderr
    assert moved.json()["records"] == 2 and moved.json()["raw_records"] == 1
    with psycopg.connect(postgres_url) as conn:
        bodies = [bytes(row[0]) for row in conn.execute(
            f"SELECT body FROM {pg_namespace}.records UNION ALL SELECT body FROM {pg_namespace}.raw_journal")]
    assert len(bodies) == 3 and not any(CANARY.encode() in body for body in bodies)
    with open_pg(tmp_path / "cache", postgres_url, pg_namespace, passphrase=PASSPHRASE) as shared:
        assert texts(shared, "grazes noon") == [f"the {CANARY} grazes at noon"]
        shared.forget([gone], confirm=True)
    with psycopg.connect(postgres_url) as conn:
        keyed = {row[0] for row in conn.execute(f"SELECT id FROM {pg_namespace}.record_keys")}
    assert kept in keyed and gone not in keyed
    back = cli("migrate", "--from", postgres_url, "--namespace", pg_namespace, "--json", data=tmp_path / "back",
               env=env)
    assert back.code == 0, back.stderr
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in (tmp_path / "back").rglob("*") if p.is_file())
    with cerememory.open(tmp_path / "back", semantic="off", passphrase=PASSPHRASE) as mem:
        assert texts(mem, "grazes noon") == [f"the {CANARY} grazes at noon"]
        assert mem.stats().total_records == 1 and mem.stats().raw_journal_records == 1
    with pytest.raises(CMPError) as locked:
        cerememory.open(tmp_path / "back", semantic="off")
    assert locked.value.code is ErrorCode.UNAUTHORIZED
