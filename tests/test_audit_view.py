"""introspect.audit: the audit log page by page, newest first, and the check of its chain."""

from __future__ import annotations

import httpx

from cerememory.security.audit import AUDIT_FILE


def test_the_audit_log_pages_newest_first_and_verifies(mem, data_dir):
    ids = [str(mem.store(f"note {i}").record_id) for i in range(3)]
    mem.forget([ids[0]], confirm=True)
    page = mem.dispatch("introspect.audit", {"limit": 2, "verify": True})
    assert [e["seq"] for e in page["entries"]] == sorted((e["seq"] for e in page["entries"]), reverse=True)
    assert page["entries"][0]["op"] == "lifecycle.forget" and ids[0] in page["entries"][0]["record_ids"]
    assert page["verification"]["ok"] and page["verification"]["entries"] >= 8
    older = mem.dispatch("introspect.audit", {"limit": 1000, "before_seq": page["next_before_seq"]})
    assert all(e["seq"] < page["next_before_seq"] for e in older["entries"]) and older["next_before_seq"] is None
    stores = mem.dispatch("introspect.audit", {"op": "encode.store", "limit": 1000})["entries"]
    assert {e["op"] for e in stores} == {"encode.store"} and len([e for e in stores if e["phase"] == "done"]) == 3
    assert mem.dispatch("introspect.audit", {})["verification"] is None


def test_a_tampered_chain_is_reported(mem, data_dir):
    mem.store("a note")
    mem.engine.audit.sync()
    path = data_dir / AUDIT_FILE
    path.write_bytes(path.read_bytes().replace(b"encode.store", b"encode.stoRe", 1))
    verification = mem.dispatch("introspect.audit", {"verify": True})["verification"]
    assert not verification["ok"] and verification["first_bad_line"] == 1 and "hash" in verification["reason"]


def test_the_console_shows_the_audit_log_and_its_chain(http_server, mem):
    record_id = mem.store("audited note").record_id
    with httpx.Client(base_url=http_server.url) as browser:
        page = browser.get("/ui/audit", params={"verify": "1", "op": "encode.store"}).text
        assert "The chain is whole" in page and str(record_id)[-8:] in page and "encode.store" in page
