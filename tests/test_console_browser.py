"""The web console in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium) against a real `cerememory serve` on loopback. One browser for the module.

With CEREMEMORY_SCREENSHOTS=<dir> the tests also save the screenshots docs/console.md shows
(`scripts/console-screenshots`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ServeProcess

pytestmark = pytest.mark.xdist_group("console-browser")  # one server and one browser (scripts/test: loadgroup)

KEY = "browser-test-key"
HOSTILE = '<script>document.title="owned"</script><b>bold?</b> & "quotes"'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = os.environ.get("CEREMEMORY_SCREENSHOTS")  # read before the fixtures clear CEREMEMORY_*

if not (CHROMIUM and CHROMEDRIVER):
    if os.environ.get("CI"):
        pytest.fail("chromium and chromium-driver are missing: .ci/run installs them", pytrace=False)
    pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    work = tmp_path_factory.mktemp("console")
    cass = work / "cass"  # cm's global trauma registry, which the playbook page shows
    cass.mkdir()
    (cass / "traumas.jsonl").write_text(json.dumps({
        "id": "trauma-1", "pattern": "^git\\s+push\\s+.*--force", "severity": "CRITICAL", "status": "active",
        "scope": "global", "created_at": "2026-11-02T09:00:00Z",
        "trigger_event": {"human_message": "a force-push overwrote the release branch"}}) + "\n")
    process = ServeProcess.serve(work / "data", work, CEREMEMORY_API_KEYS=KEY, CASS_MEMORY_HOME=str(cass))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def seeded(server: ServeProcess) -> dict[str, str]:
    """A few memories, a journal session and a hostile record, stored through the API."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as api:
        def store(text: str, **extra: Any) -> str:
            answer = api.post("/v1/encode", json={"content": {"blocks": [
                {"modality": "text", "data": list(text.encode())}]}, **extra})
            answer.raise_for_status()
            return str(answer.json()["record_id"])

        lunch = store("Lunch with Bob: we cut the Q3 roadmap to two projects", meta={
            "intent": "plan Q3", "rationale": "the team is too small for four projects"},
            emotion={"joy": 0.8, "intensity": 0.6, "valence": 0.7})
        review = store("Bob reviewed the roadmap on Friday", associations=[
            {"target_id": lunch, "association_type": "semantic", "weight": 0.8}])
        fact = store("The deploy key rotates every Monday", store="semantic")
        hostile = store(HOSTILE)
        api.post("/v1/encode/raw", json={
            "session_id": "chat-42", "speaker": "user",
            "metadata": {"agent": "claude-code", "workspace": "/home/me/app"},
            "content": {"blocks": [{"modality": "text", "data": list(b"can you rotate the deploy key?")}]}},
        ).raise_for_status()
        store("never force-push to main", store="procedural", metadata={
            "cm_kind": "bullet", "bullet_id": "b-1", "isNegative": True, "maturity": "proven",
            "feedbackEvents": [{"type": "helpful", "timestamp": "2026-11-30T10:00:00Z"}]})
    return {"lunch": lunch, "review": review, "fact": fact, "hostile": hostile}


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER or ""), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: webdriver.Chrome, seconds: float = 60) -> WebDriverWait:
    return WebDriverWait(driver, seconds)


def _shoot(driver: webdriver.Chrome, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / f"console-{name}.png"))


def _sign_in(driver: webdriver.Chrome, url: str) -> None:
    driver.get(f"{url}/ui/")
    if driver.current_url.endswith("/ui/sign-in"):
        driver.find_element(By.ID, "key").send_keys(KEY)
        driver.find_element(By.ID, "sign-in").click()
        _wait(driver).until(ec.presence_of_element_located((By.ID, "total-records")))


def _csp_violations(driver: webdriver.Chrome) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if "Content Security Policy" in entry["message"]]


def test_sign_in_and_sign_out(server, seeded, browser):
    browser.get(f"{server.url}/")
    assert browser.current_url == f"{server.url}/ui/sign-in"
    _shoot(browser, "sign-in")
    browser.find_element(By.ID, "key").send_keys("not-the-key")
    browser.find_element(By.ID, "sign-in").click()
    # the answer is a new page: wait for it, as the click returns once the form is sent
    refused = _wait(browser).until(ec.presence_of_element_located((By.ID, "error")))
    assert "not one this server accepts" in refused.text
    _sign_in(browser, server.url)
    assert browser.find_element(By.ID, "total-records").text == "5"
    browser.find_element(By.ID, "sign-out").click()
    _wait(browser).until(ec.url_to_be(f"{server.url}/ui/sign-in"))
    browser.get(f"{server.url}/ui/record/{seeded['lunch']}")
    assert browser.current_url == f"{server.url}/ui/sign-in"


def test_every_page_renders_with_data(server, seeded, browser):
    _sign_in(browser, server.url)
    assert browser.find_element(By.ID, "journal-size").text == "1"
    stores = browser.find_element(By.ID, "stores").text
    assert "episodic 3" in stores and "semantic 1" in stores and "forgotten within 30 days" in stores
    assert browser.find_elements(By.CSS_SELECTOR, "svg.histogram rect")
    _wait(browser).until(ec.presence_of_element_located((By.ID, "recent")))  # loaded after the page
    assert "Lunch with Bob" in browser.find_element(By.ID, "recent").text
    _shoot(browser, "overview")
    browser.get(f"{server.url}/ui/store/semantic")
    assert "The deploy key rotates every Monday" in browser.find_element(By.ID, "listing").text
    browser.get(f"{server.url}/ui/journal")
    groups = browser.find_element(By.ID, "sessions").text
    assert "claude-code" in groups and "/home/me/app" in groups
    _shoot(browser, "journal")
    browser.find_element(By.CSS_SELECTOR, "#sessions a.session").click()
    _wait(browser).until(ec.url_contains("session=chat-42"))
    assert "can you rotate the deploy key?" in browser.find_element(By.ID, "journal").text
    browser.get(f"{server.url}/ui/evolution")
    assert browser.find_element(By.ID, "adjustments").is_displayed()
    assert browser.find_element(By.ID, "dream-runs").is_displayed()
    browser.get(f"{server.url}/ui/playbook")
    rules = browser.find_element(By.ID, "playbook").text
    assert "never force-push to main" in rules and "anti-pattern" in rules
    browser.find_element(By.CSS_SELECTOR, "details.feedback summary").click()  # the history unfolds
    assert "helpful 2026-11-30" in browser.find_element(By.CSS_SELECTOR, "details.feedback ol").text
    assert "a force-push overwrote the release branch" in browser.find_element(By.ID, "traumas").text
    _shoot(browser, "playbook")
    browser.get(f"{server.url}/ui/audit")
    browser.find_element(By.ID, "verify").click()
    browser.find_element(By.ID, "filter").click()  # a form submitted: wait for the page it loads
    verification = _wait(browser, 120).until(ec.presence_of_element_located((By.ID, "verification")))
    assert "The chain is whole" in verification.text
    assert "encode.store" in browser.find_element(By.ID, "audit").text
    _shoot(browser, "audit")
    assert _csp_violations(browser) == []


def test_search_shows_the_signals_that_found_each_memory(server, seeded, browser):
    _sign_in(browser, server.url)
    browser.get(f"{server.url}/ui/search")
    browser.find_element(By.ID, "q").send_keys("roadmap")
    browser.find_element(By.ID, "search").click()
    _wait(browser).until(ec.text_to_be_present_in_element((By.ID, "signals"), "bm25"))
    hits = browser.find_elements(By.CSS_SELECTOR, "#hits .hit")
    assert len(hits) >= 2 and "Lunch with Bob" in browser.find_element(By.ID, "hits").text
    assert any("BM25" in s.text for s in browser.find_elements(By.CSS_SELECTOR, ".signal"))
    assert "q=roadmap" in browser.current_url  # htmx pushed the search into the address bar
    _shoot(browser, "search")
    assert _csp_violations(browser) == []


def test_a_record_shows_its_meta_memory_links_and_forecast_plot(server, seeded, browser):
    _sign_in(browser, server.url)
    browser.get(f"{server.url}/ui/record/{seeded['review']}")
    browser.find_element(By.CSS_SELECTOR, f"#associations a[href='/ui/record/{seeded['lunch']}']").click()
    _wait(browser).until(ec.url_contains(seeded["lunch"]))
    # the drawn neighbourhood: its nodes are links too
    browser.find_element(By.CSS_SELECTOR, f"#neighbourhood a[href='/ui/record/{seeded['review']}'] circle").click()
    _wait(browser).until(ec.url_contains(seeded["review"]))
    browser.find_element(By.CSS_SELECTOR, f"#neighbourhood a[href='/ui/record/{seeded['lunch']}'] circle").click()
    _wait(browser).until(ec.url_contains(seeded["lunch"]))
    assert "plan Q3" in browser.find_element(By.ID, "meta").text
    assert "joy" in browser.find_element(By.ID, "emotion").text
    curve = browser.find_element(By.ID, "fidelity-curve")
    assert curve.is_displayed() and curve.find_elements(By.CSS_SELECTOR, "polyline.forecast")
    assert browser.find_element(By.ID, "forgotten-at").text
    _shoot(browser, "record")
    browser.find_element(By.ID, "reinforce").click()  # a form post, with its CSRF token, from this site
    _wait(browser).until(ec.url_contains("notice=reinforced"))
    assert "Reinforced" in browser.find_element(By.ID, "notice").text
    assert _csp_violations(browser) == []


def test_a_memory_holding_html_and_script_renders_as_text(server, seeded, browser):
    _sign_in(browser, server.url)
    browser.get(f"{server.url}/ui/record/{seeded['hostile']}")
    assert browser.find_element(By.ID, "content").text == HOSTILE
    assert browser.title != "owned" and not browser.find_elements(By.CSS_SELECTOR, "#content b")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def test_forget_asks_for_confirmation_then_removes_the_record(server, seeded, browser):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as api:
        doomed = api.post("/v1/encode", json={"content": {"blocks": [
            {"modality": "text", "data": list(b"A note to throw away")}]}}).json()["record_id"]
    _sign_in(browser, server.url)
    browser.get(f"{server.url}/ui/record/{doomed}")
    browser.find_element(By.ID, "forget").click()
    browser.find_element(By.ID, "forget-confirm").click()  # unticked: the form does not go
    assert browser.current_url.endswith(f"/ui/record/{doomed}/forget")
    browser.find_element(By.ID, "confirm").click()
    browser.find_element(By.ID, "forget-confirm").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "notice")))
    browser.get(f"{server.url}/ui/record/{doomed}")
    assert browser.find_element(By.TAG_NAME, "h1").text == "RECORD_NOT_FOUND"


def test_the_pages_work_without_javascript(server, seeded, browser):
    _sign_in(browser, server.url)
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        browser.get(f"{server.url}/ui/search")
        browser.find_element(By.ID, "q").send_keys("deploy key")
        browser.find_element(By.ID, "search").click()  # a plain GET form
        _wait(browser).until(ec.presence_of_element_located((By.ID, "signals")))
        assert "The deploy key rotates every Monday" in browser.find_element(By.ID, "hits").text
        browser.get(f"{server.url}/ui/record/{seeded['fact']}")
        assert browser.find_element(By.ID, "fidelity-curve").is_displayed()
        browser.get(f"{server.url}/ui/")
        browser.find_element(By.LINK_TEXT, "Show the most recent memories").click()  # htmx would load it
        _wait(browser).until(ec.text_to_be_present_in_element((By.ID, "recent"), "The deploy key rotates every Monday"))
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


def test_the_api_docs_load_offline_with_an_authorize_button(server, browser):
    browser.get(f"{server.url}/docs")  # the first OpenAPI document is built on demand: slow on a busy machine
    _wait(browser, 120).until(ec.presence_of_element_located((By.CSS_SELECTOR, "button.authorize")))
    assert browser.find_elements(By.CSS_SELECTOR, ".opblock")
    _shoot(browser, "docs")
    browser.get(f"{server.url}/redoc")
    _wait(browser, 120).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".api-content")))
