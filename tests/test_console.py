"""The web console over plain HTTP: who may see it, which actions it takes, and that stored
memories render as text (the browser tests are in test_console_browser.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
import pytest

from cerememory.security.auth import KeyRing
from cerememory.transport.http import create_app

from .conftest import ServerThread

KEY = "console-test-key"
HOSTILE = '<script>document.title="owned"</script><img src=x onerror=alert(1)> & "quotes"'


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


@pytest.fixture
def keyed(mem) -> Iterator[ServerThread]:
    server = ServerThread(app=create_app(mem.engine, keys=KeyRing([KEY])))
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def _signed_in(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url) as browser:
        form = browser.get("/ui/sign-in")
        answer = browser.post("/ui/sign-in", data={"csrf": _csrf(form.text), "key": KEY})
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
        yield browser


def test_the_root_leads_to_the_console_and_an_open_server_needs_no_sign_in(http_server, mem):
    mem.store("the deploy key rotates every Monday", store="semantic")
    with httpx.Client(base_url=http_server.url) as browser:
        root = browser.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        page = browser.get("/ui/")
        assert page.status_code == 200 and 'hx-get="/ui/recent"' in page.text
        assert "the deploy key rotates every Monday" in browser.get("/ui/recent").text
        cookie = page.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        policy = page.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "unsafe-inline" not in policy and "default-src 'none'" in policy
        assert page.headers["x-frame-options"] == "DENY"


def test_every_page_renders_with_data(http_server, mem):
    first = mem.store("Lunch with Bob: we cut the Q3 roadmap", emotion="joy",
                      meta={"intent": "plan Q3", "rationale": "the team is too small"}).record_id
    mem.store("Bob reviewed the roadmap", associations=[{"target_id": first, "association_type": "semantic",
                                                          "weight": 0.8}])
    mem.store_raw("user: cut the roadmap?", session_id="chat-42")
    with httpx.Client(base_url=http_server.url) as browser:
        overview = browser.get("/ui/").text
        assert 'id="total-records">2<' in overview and 'id="journal-size">1<' in overview
        assert "forgotten within 7 days" in overview and "<svg" in overview
        record = browser.get(f"/ui/record/{first}").text
        assert "plan Q3" in record and "the team is too small" in record and 'id="fidelity-curve"' in record
        assert 'class="forecast"' in record and "joy" in record
        graph = record[record.index('id="neighbourhood"'):record.index("</svg>", record.index('id="neighbourhood"'))]
        assert graph.count("<circle") == 2 and graph.count('<line class="edge"') == 1
        assert f'href="/ui/record/{first}"' in graph and "Bob reviewed" in graph
        search = browser.get("/ui/search", params={"q": "roadmap", "mode": "perfect"}).text
        assert 'id="signals">bm25' in search and "BM25" in search and "fused" in search
        assert 'class="trace"' in search and f'href="/ui/record/{first}"' in search  # activation reached it
        assert "Lunch with Bob" in browser.get("/ui/store/episodic").text
        assert "user: cut the roadmap?" in browser.get("/ui/journal", params={"session": "chat-42"}).text
        assert "Parameters the evolution engine tuned" in browser.get("/ui/evolution").text
        partial = browser.get("/ui/search", params={"q": "roadmap"}, headers={"HX-Request": "true"}).text
        assert "<html" not in partial and 'id="hits"' in partial


def test_memory_content_renders_as_text(http_server, mem):
    record_id = mem.store(HOSTILE, meta={"intent": HOSTILE}).record_id
    with httpx.Client(base_url=http_server.url) as browser:
        for path in ("/ui/recent", f"/ui/record/{record_id}", "/ui/search?q=quotes", "/ui/store/episodic"):
            html = browser.get(path).text
            assert "<script>document" not in html and "<img src=x" not in html, path
            assert "&lt;script&gt;document.title=" in html, path


def test_an_action_without_its_csrf_token_or_from_another_site_is_refused(http_server, mem):
    record_id = mem.store("keep me").record_id
    with httpx.Client(base_url=http_server.url) as browser:
        token = _csrf(browser.get(f"/ui/record/{record_id}/forget").text)
        target = f"/ui/record/{record_id}/forget"
        refused = [
            browser.post(target, data={"confirm": "yes"}),
            browser.post(target, data={"confirm": "yes", "csrf": "forged"}),
            browser.post(target, data={"confirm": "yes", "csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}),
            browser.post(target, data={"confirm": "yes", "csrf": token}, headers={"Origin": "https://evil.example"}),
            httpx.post(http_server.url + target, data={"confirm": "yes", "csrf": token}),  # no session cookie
            browser.post(target, content=f"confirm=yes&csrf={token}", headers={"Content-Type": "text/plain"}),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403, 403, 403, 415]
        assert mem.inspect(record_id).id == record_id
        unconfirmed = browser.post(target, data={"csrf": token})
        assert unconfirmed.status_code == 400 and "FORGET_UNCONFIRMED" in unconfirmed.text
        done = browser.post(target, data={"confirm": "yes", "csrf": token}, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == "/ui/?notice=forgotten"
        assert browser.get(f"/ui/record/{record_id}").status_code == 404
        forgets = mem.dispatch("introspect.audit", {"op": "lifecycle.forget"})["entries"]
        assert forgets[0]["transport"] == "console" and str(record_id) in forgets[0]["record_ids"]
    # the form routes take no JSON API call: a form post to the API is still refused
    assert httpx.post(f"{http_server.url}/v1/encode", data={"content": "x"}).status_code == 415


def test_a_keyed_server_asks_for_a_key_and_the_session_never_opens_the_api(keyed, mem):
    record_id = mem.store("a secret plan").record_id
    with httpx.Client(base_url=keyed.url) as stranger:
        assert stranger.get("/ui/", follow_redirects=False).headers["location"] == "/ui/sign-in"
        assert stranger.get(f"/ui/record/{record_id}", follow_redirects=False).status_code == 303
        form = stranger.get("/ui/sign-in")
        assert form.status_code == 200 and "a secret plan" not in form.text
        wrong = stranger.post("/ui/sign-in", data={"csrf": _csrf(form.text), "key": "guess"})
        assert wrong.status_code == 401 and "not one this server accepts" in wrong.text
        assert stranger.post("/ui/sign-in", data={"key": KEY}).status_code == 403  # no CSRF token
    with _signed_in(keyed.url) as browser:
        assert "a secret plan" in browser.get(f"/ui/record/{record_id}").text
        assert browser.get("/v1/introspect/stats").status_code == 401  # the cookie is not a bearer key
        token = _csrf(browser.get("/ui/").text)
        out = browser.post("/ui/sign-out", data={"csrf": token})
        assert out.status_code == 303 and out.headers["location"] == "/ui/sign-in"
        assert browser.get("/ui/", follow_redirects=False).headers["location"] == "/ui/sign-in"


def test_sign_in_replaces_the_session(keyed):
    with httpx.Client(base_url=keyed.url) as browser:
        form = browser.get("/ui/sign-in")
        before = browser.cookies["cerememory_console"]
        browser.post("/ui/sign-in", data={"csrf": _csrf(form.text), "key": KEY})
        assert browser.cookies["cerememory_console"] != before
        with httpx.Client(base_url=keyed.url, cookies={"cerememory_console": before}) as fixated:
            assert fixated.get("/ui/", follow_redirects=False).status_code == 303


def test_revoking_the_key_ends_its_console_sessions(mem, tmp_path):
    from cerememory.security.keys import KeyStore, ServerKeys

    store = KeyStore(tmp_path / "keys")
    entry, secret = store.create("laptop")
    server = ServerThread(app=create_app(mem.engine, keys=ServerKeys(None, store)))
    try:
        with httpx.Client(base_url=server.url) as browser:
            form = browser.get("/ui/sign-in")
            browser.post("/ui/sign-in", data={"csrf": _csrf(form.text), "key": secret})
            assert browser.get("/ui/").status_code == 200
            store.revoke(entry.id)
            assert browser.get("/ui/", follow_redirects=False).headers["location"] == "/ui/sign-in"
    finally:
        server.stop()


def test_the_playbook_page_orders_rules_by_maturity_and_score_with_feedback_and_traumas(http_server, mem, tmp_path,
                                                                                      monkeypatch):
    from cerememory.cm.backend import bullet_request
    from cerememory.cm.bullets import normalise

    recent = datetime.now(UTC).isoformat()
    helpful = {"type": "helpful", "timestamp": recent}
    rules = [normalise({"id": "b-1", "content": "run the linter before committing", "category": "workflow"}),
             normalise({"id": "b-2", "content": "never force-push to main", "isNegative": True,
                        "maturity": "proven", "feedbackEvents": [
                            {"type": "helpful", "timestamp": "2026-11-30T10:00:00Z", "sessionPath": "s/1.jsonl"}]}),
             normalise({"id": "b-3", "content": "<b>escape</b> me", "maturity": "established",
                        "feedbackEvents": [helpful]}),
             normalise({"id": "b-4", "content": "pin the toolchain version", "maturity": "established",
                        "feedbackEvents": [helpful, helpful, {"type": "harmful", "timestamp": recent,
                                                              "reason": "outdated"}]}),
             normalise({"id": "b-5", "content": "prefer small commits", "maturity": "established",
                        "feedbackEvents": [helpful, helpful, helpful]})]
    for rule in rules:
        mem.dispatch("encode.store", bullet_request(rule))
    mem.store("not a rule", store="procedural")
    home = tmp_path / "cass"
    home.mkdir()
    (home / "traumas.jsonl").write_text(json.dumps({
        "id": "trauma-1", "pattern": "^rm -rf /data", "severity": "FATAL", "status": "active", "scope": "global",
        "created_at": "2026-11-01T00:00:00Z",
        "trigger_event": {"human_message": "<i>lost</i> the data volume"}}) + "\n")
    monkeypatch.setenv("CASS_MEMORY_HOME", str(home))
    with httpx.Client(base_url=http_server.url) as browser:
        page = browser.get("/ui/playbook").text
    table = page[page.index('id="playbook"'):page.index('id="traumas"')]
    order = [table.index(t) for t in ("never force-push", "prefer small", "escape", "pin the toolchain",
                                      "run the linter")]
    assert order == sorted(order) and "not a rule" not in table
    assert "anti-pattern" in table and "&lt;b&gt;escape&lt;/b&gt;" in table
    assert "1 event, last helpful 2026-11-30" in table and "s/1.jsonl" in table
    assert "harmful" in table and "outdated" in table
    assert re.findall(r'<td class="score">([-.0-9]+)</td>', table)[1:] == ["3.00", "1.00", "-2.00", "0.00"]
    traumas = page[page.index('id="traumas"'):]
    assert "^rm -rf /data" in traumas and "FATAL" in traumas and "&lt;i&gt;lost&lt;/i&gt;" in traumas


def test_reinforce_and_change_store_from_the_record_page(http_server, mem):
    record_id = mem.store("the backup runs at 02:00").record_id
    before = mem.inspect(record_id).fidelity.reinforcement_count
    with httpx.Client(base_url=http_server.url) as browser:
        page = browser.get(f"/ui/record/{record_id}").text
        token = _csrf(page)
        assert 'id="reinforce"' in page and 'id="move-store"' in page and '<option value="working"' not in page
        reinforced = browser.post(f"/ui/record/{record_id}/reinforce", data={"csrf": token}, follow_redirects=False)
        assert reinforced.status_code == 303
        assert reinforced.headers["location"] == f"/ui/record/{record_id}?notice=reinforced"
        assert mem.inspect(record_id).fidelity.reinforcement_count == before + 1
        assert "Reinforced" in browser.get(reinforced.headers["location"]).text
        target = f"/ui/record/{record_id}/store"
        refused = [browser.post(target, data={"store": "semantic"}),
                   browser.post(f"/ui/record/{record_id}/reinforce", data={"csrf": "forged"}),
                   browser.post(target, data={"store": "working", "csrf": token})]
        assert [r.status_code for r in refused] == [403, 403, 400]
        assert mem.inspect(record_id).store.value == "episodic"
        assert mem.inspect(record_id).fidelity.reinforcement_count == before + 1
        moved = browser.post(target, data={"store": "semantic", "csrf": token}, follow_redirects=False)
        assert moved.headers["location"] == f"/ui/record/{record_id}?notice=moved"
        assert "Moved to the semantic store" in browser.get(moved.headers["location"]).text
    assert mem.inspect(record_id).store.value == "semantic"
    assert [m.record.id for m in mem.recall("backup", stores=["semantic"]).memories] == [record_id]
    assert mem.recall("backup", stores=["episodic"]).memories == []
    audited = {e["op"]: e for e in mem.dispatch("introspect.audit", {})["entries"]}
    assert audited["lifecycle.reinforce"]["transport"] == "console"
    assert str(record_id) in audited["encode.update"]["record_ids"]


def test_the_journal_groups_sessions_and_links_dreams_both_ways(http_server, mem):
    turns = [("s-api", "codex", "/src/api", "user: the deploy script needs a retry on timeouts"),
             ("s-api", "codex", "/src/api", "assistant: added three retries with backoff to deploy.sh"),
             ("s-web", "claude-code", "/src/web", "user: <b>bold</b> the login button")]
    mem.dispatch("encode.batch_raw", {"records": [
        {"session_id": s, "topic_id": "t", "content": {"blocks": [{"text": text}]},
         "metadata": {"agent": a, "workspace": w}, "created_at": f"2026-03-01T10:0{n}:00Z"}
        for n, (s, a, w, text) in enumerate(turns)]})
    summary = mem.dream_tick(session_id="s-api").groups[0].episodic_summary_id
    with httpx.Client(base_url=http_server.url) as browser:
        sessions = browser.get("/ui/journal").text
        groups = sessions[sessions.index('id="sessions"'):]
        assert groups.index("claude-code") < groups.index("/src/web") < groups.index("codex") < groups.index("/src/api")
        assert 'href="/ui/journal?session=s-api"' in groups and "login button" not in groups
        assert "s-web" not in browser.get("/ui/journal", params={"agent": "codex"}).text
        one = browser.get("/ui/journal", params={"session": "s-api"}).text
        table = one[one.index('id="journal"'):]
        assert table.index("needs a retry") < table.index("added three retries") and "login button" not in table
        assert f'href="/ui/record/{summary}"' in one and f'href="/ui/journal?derived={summary}"' in one
        sources = browser.get("/ui/journal", params={"derived": str(summary)}).text
        assert "needs a retry" in sources and "added three retries" in sources and "login button" not in sources
        assert f'href="/ui/journal?derived={summary}"' in browser.get(f"/ui/record/{summary}").text
        assert browser.get("/ui/journal", params={"derived": "nope"}).status_code == 400


def test_the_evolution_page_lists_dream_and_consolidation_runs_with_counts(http_server, mem):
    mem.store_raw("user: the nightly export failed on a full disk", session_id="ops", topic_id="export")
    mem.store_raw("assistant: moved the export to the larger volume", session_id="ops", topic_id="export")
    mem.dream_tick()
    mem.consolidate(dry_run=True)
    with httpx.Client(base_url=http_server.url) as browser:
        page = browser.get("/ui/evolution").text
    dreams = page[page.index('id="dream-runs"'):page.index('id="consolidation-runs"')]
    row = re.search(r"<tr><td>[^<]+</td><td>(\w+)</td><td>done</td>\s*<td>1</td><td>2</td><td>1</td>", dreams)
    assert row, dreams
    consolidations = page[page.index('id="consolidation-runs"'):page.index('id="adjustments"')]
    assert "dry run" in consolidations and "incremental" in consolidations
    assert "No dream has run yet" not in page
