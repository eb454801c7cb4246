"""The `cerememory` command as a subprocess, on a real data directory."""

from __future__ import annotations

import json

import pytest

import cerememory


def test_store_recall_inspect_forget_round_trip(cli):
    stored = cli("store", "The deploy key rotates every Monday", "--store", "semantic", "--json")
    assert stored.code == 0, stored.stderr
    rid = stored.json()["record_id"]
    assert stored.json()["store"] == "semantic"

    recalled = cli("recall", "deploy key", "--json")
    assert recalled.code == 0, recalled.stderr
    hit = recalled.json()["memories"][0]
    assert hit["record"]["id"] == rid
    assert hit["rendered_content"]["blocks"][0]["text"] == "The deploy key rotates every Monday"

    inspected = cli("inspect", rid, "--json").json()
    assert inspected["access_count"] == 1

    refused = cli("forget", rid, "--json")
    assert refused.code == 2 and refused.json()["error"]["code"] == "FORGET_UNCONFIRMED"
    assert cli("forget", rid, "--confirm", "--json").json() == {"records_deleted": 1}
    missing = cli("inspect", rid, "--json")
    assert missing.code == 3 and missing.json()["error"]["code"] == "RECORD_NOT_FOUND"


def test_human_output_is_a_table(cli):
    assert cli("store", "penguins live in Antarctica").code == 0
    result = cli("recall", "penguins")
    assert result.code == 0
    assert "penguins" in result.stdout and "Antarctica" in result.stdout and "episodic" in result.stdout
    assert "signals: bm25" in result.stdout


def test_store_options(cli, tmp_path):
    meta = json.dumps({"intent": "remember preferences", "rationale": "onboarding"})
    result = cli("store", "Ana prefers dark mode", "--emotion", "joy", "--meta-json", meta,
                 "--metadata-json", '{"source": "chat"}', "--created-at", "2024-01-02T03:04:05Z", "--json")
    assert result.code == 0, result.stderr
    record = cli("inspect", result.json()["record_id"], "--json").json()
    assert record["emotion"]["joy"] == 1.0
    assert record["meta"]["intent"] == "remember preferences"
    assert record["metadata"] == {"source": "chat"}
    assert record["created_at"] == "2024-01-02T03:04:05Z"
    path = tmp_path / "note.txt"
    path.write_text("from a file")
    assert cli("store", "--file", str(path), "--json").code == 0
    piped = cli("store", "-", "--json", input="from stdin")
    assert piped.code == 0
    listed = cli("recall", "--json", "--limit", "5").json()["memories"]
    texts = [h["record"]["content"]["blocks"][0]["text"] for h in listed]
    assert "from a file" in texts and "from stdin" in texts


@pytest.mark.parametrize("args,field", [
    (["store", "x", "--meta-json", "{oops"], "--meta-json"),
    (["store", "x", "--embedding", "1,two"], "--embedding"),
    (["store", "x", "--emotion", "meh"], "--emotion"),
    (["store", "x", "--created-at", "yesterday"], "--created-at"),
    (["store", "x", "--store", "attic"], "--store"),
    (["recall", "--limit", "zero"], "--limit"),
    (["nonsense"], "nonsense"),
])
def test_bad_arguments_give_a_json_error(cli, args, field):
    result = cli(*args, "--json")
    assert result.code == 2, result.stdout + result.stderr
    error = result.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert field in error["message"]


def test_invalid_utf8_file_is_refused(cli, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café".encode("latin-1"))
    result = cli("store", "--file", str(path), "--json")
    assert result.code == 2
    assert "UTF-8" in result.json()["error"]["message"]
    assert cli("stats", "--json").json()["total_records"] == 0


def test_batch_from_stdin_and_file(cli, tmp_path):
    lines = "\n".join(json.dumps({"text": f"batch line {i}"}) for i in range(1500))
    result = cli("batch", "-", "--infer-associations", "--json", input=lines)
    assert result.code == 0, result.stderr
    body = result.json()
    assert len(body["results"]) == 1500
    assert body["associations_inferred"] == 2 * (1000 - 1) + 2 * (500 - 1)
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"content": {"blocks": [{"text": "full request"}]}, "store": "procedural"}) + "\n")
    assert cli("batch", str(path), "--json").json()["results"][0]["store"] == "procedural"
    assert cli("stats", "--json").json()["total_records"] == 1501


def test_malformed_batch_stores_nothing(cli):
    good = json.dumps({"text": "fine"})
    for bad in ("{not json", json.dumps([1, 2]), json.dumps({"text": "x", "store": "attic"})):
        result = cli("batch", "-", "--json", input=f"{good}\n{bad}\n")
        assert result.code == 2, result.stdout
        assert "error" in result.json()
    assert cli("stats", "--json").json()["total_records"] == 0


def _texts_and_vectors(tmp_path, n: int, dim: int = 8):
    """A JSONL file of `n` texts and a .npy file of their `n` vectors."""
    import numpy as np

    lines = tmp_path / "texts.jsonl"
    lines.write_text("\n".join(json.dumps({"text": f"line {i}"}) for i in range(n)))
    vectors = np.random.default_rng(n).standard_normal((n, dim)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", vectors)
    return lines, tmp_path / "vectors.npy", vectors


def _nearest(cli, vector, *server: str) -> str:
    found = cli("recall", "--embedding", ",".join(map(str, vector.tolist())), "--limit", "1", *server, "--json")
    assert found.code == 0, found.stderr
    return found.json()["memories"][0]["record"]["content"]["blocks"][0]["text"]


def test_batch_with_embeddings_gives_each_record_its_row(cli, tmp_path):
    lines, npy, vectors = _texts_and_vectors(tmp_path, 1200)
    result = cli("batch", str(lines), "--embeddings", str(npy), "--json")
    assert result.code == 0, result.stderr
    assert len(result.json()["results"]) == 1200
    assert _nearest(cli, vectors[1100]) == "line 1100"  # a row of the second batch of 1000


def test_batch_with_embeddings_through_a_server(cli, tmp_path, http_server):
    lines, npy, vectors = _texts_and_vectors(tmp_path, 3)
    server = ("--server-url", http_server.url)
    assert cli("batch", str(lines), "--embeddings", str(npy), *server, "--json").code == 0
    assert _nearest(cli, vectors[2], *server) == "line 2"


@pytest.mark.parametrize("case,says", [
    ("a row short", "not 3 rows"), ("one vector", "not 3 rows"), ("not numpy", "could not be read"),
    ("pickled", "could not be read"), ("a NaN", "finite numbers"), ("a vector in a line", "of its own"),
])
def test_batch_embeddings_that_do_not_fit_store_nothing(cli, tmp_path, case, says):
    import numpy as np

    lines, npy, vectors = _texts_and_vectors(tmp_path, 3)
    if case == "a row short":
        np.save(npy, vectors[:2])
    elif case == "one vector":
        np.save(npy, vectors[0])
    elif case == "not numpy":
        npy.write_text("0.1, 0.2")
    elif case == "pickled":
        np.save(npy, np.array([{"a": 1}] * 3, dtype=object), allow_pickle=True)
    elif case == "a NaN":
        vectors[1, 4] = np.nan
        np.save(npy, vectors)
    else:  # the second line brings a vector of its own
        lines.write_text("\n".join(json.dumps({"text": f"line {i}", **({"embedding": [1.0] * 8} if i == 1 else {})})
                                   for i in range(3)))
    result = cli("batch", str(lines), "--embeddings", str(npy), "--json")
    assert result.code == 2, result.stdout + result.stderr
    error = result.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and says in error["message"], error
    assert cli("stats", "--json").json()["total_records"] == 0


def test_raw_journal_commands(cli):
    assert cli("raw-store", "user: rotate the key", "--session-id", "s1", "--json").code == 0
    assert cli("raw-store", "secret token abc", "--session-id", "s1", "--secrecy-level", "secret").code == 0
    found = cli("raw-recall", "rotate", "--json").json()
    assert [r["content"]["blocks"][0]["text"] for r in found["records"]] == ["user: rotate the key"]
    everything = cli("raw-recall", "--session-id", "s1", "--secrecy-levels", "public,secret", "--json").json()
    assert everything["total_candidates"] == 2
    missing = cli("raw-store", "x", "--json")
    assert missing.code == 2 and "--session-id" in missing.json()["error"]["message"]


def test_timeline_graph_associate_mode_stats(cli):
    a = cli("store", "alpha", "--json").json()["record_id"]
    lines = json.dumps({"text": "beta", "associations": [
        {"target_id": a, "association_type": "semantic", "weight": 0.9}]})
    b = cli("batch", "-", "--json", input=lines).json()["results"][0]["record_id"]
    timeline = cli("timeline", "--granularity", "day", "--json").json()
    assert sum(bucket["count"] for bucket in timeline["buckets"]) == 2
    graph = cli("graph", a, "--json").json()
    assert {n["id"] for n in graph["nodes"]} == {a, b}
    assoc = cli("associate", b, "--json").json()
    assert assoc["memories"][0]["record"]["id"] == a
    assert cli("mode", "perfect", "--json").code == 0
    stats = cli("stats", "--json").json()
    assert stats["recall_mode"] == "perfect" and stats["total_associations"] == 1
    human = cli("stats")
    assert "episodic records" in human.stdout


def test_reindex_and_config_show(cli, tmp_path, data_dir):
    cli("store", "something to index")
    result = cli("reindex", "--json")
    assert result.code == 0, result.stderr
    assert result.json() == {"records": 1, "journal": 0}
    config_file = tmp_path / "config.toml"
    config_file.write_text('[memory]\nworking_capacity = 9\n[recall]\nfusion = "normalized"\n')
    shown = cli("config", "show", "--config", str(config_file), "--json",
                env={"CEREMEMORY_RECALL__RRF_K": "30"}).json()
    settings = {s["name"]: s for s in shown["settings"]}
    assert settings["memory.working_capacity"]["value"] == 9
    assert settings["memory.working_capacity"]["source"] == f"file:{config_file}"
    assert (settings["recall.rrf_k"]["value"], settings["recall.rrf_k"]["source"]) == (
        30, "env:CEREMEMORY_RECALL__RRF_K")
    assert settings["data_dir"]["source"] == "env:CEREMEMORY_DATA_DIR"
    flagged = cli("config", "show", "--data-dir", str(tmp_path / "x"), "--json").json()
    assert {s["name"]: s for s in flagged["settings"]}["data_dir"]["source"] == "flag"
    bad = cli("config", "show", "--config", str(tmp_path / "missing.toml"), "--json")
    assert bad.code == 2


def test_bad_config_value_names_the_setting(cli, tmp_path):
    result = cli("stats", "--json", env={"CEREMEMORY_MEMORY__WORKING_CAPACITY": "0"})
    assert result.code == 2
    assert "memory.working_capacity" in result.json()["error"]["message"]


def test_second_process_gets_the_owner_pid(cli, data_dir):
    with cerememory.open(data_dir, semantic="off"):
        result = cli("stats", "--json")
    assert result.code == 4
    error = result.json()["error"]
    assert error["code"] == "DATA_DIR_LOCKED"
    assert "--server-url" in error["details"]["hint"]


HEAVY = {"pydantic", "numpy", "duckdb", "tantivy", "networkx", "httpx", "cerememory.engine", "cerememory.cmp.messages"}


def _loaded(stderr: str) -> set[str]:
    """The modules `python -X importtime` reported importing."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_command_against_a_server_loads_neither_the_engine_nor_the_models(cli, http_server):
    """A client command is a short process: it builds its request, sends it with the standard
    library and prints the answer; the server validates."""
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    stored = cli("store", "a light client stored this", "--server-url", http_server.url, "--json", env=env)
    assert stored.code == 0, stored.stderr
    recalled = cli("recall", "light client", "--server-url", http_server.url, "--json", env=env)
    assert recalled.json()["memories"][0]["record"]["id"] == stored.json()["record_id"]
    assert "cerememory.cli" in _loaded(recalled.stderr)
    assert not _loaded(stored.stderr) & HEAVY and not _loaded(recalled.stderr) & HEAVY
    helped = cli("--help", env=env)
    assert helped.code == 0 and not _loaded(helped.stderr) & HEAVY


def test_stats_from_a_server_count_the_commits_its_stores_shared(cli, http_server, mem):
    """A server counts the commits of stores and batches since it opened the data dir, a batch
    being one call; a CLI that opens the data dir itself has none to count, and shows no row."""
    mem.store("one")
    mem.store_batch([{"content": {"blocks": [{"text": "two"}]}}, {"content": {"blocks": [{"text": "three"}]}}])
    stats = cli("stats", "--server-url", http_server.url, "--json").json()
    assert (stats["write_commits"], stats["writes_committed"]) == (2, 2)
    assert "2 in 2 commits (1.0 a commit)" in cli("stats", "--server-url", http_server.url).stdout
    assert "writes committed" not in cli("stats").stdout
