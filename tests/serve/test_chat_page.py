"""The chat page at GET /, in headless Chromium: it streams reasoning and answer into their panes,
shows tool calls, and keeps the conversation across turns. A screenshot is written."""

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

if CHROMIUM is None:
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium for this test", pytrace=False)
    pytest.skip("Debian chromium not installed (apt-get install chromium); CI installs it", allow_module_level=True)


def _browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


def test_two_turn_conversation_and_screenshot(base, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        page.goto(base + "/")
        page.wait_for_function("document.getElementById('model').textContent === 'default'")
        for n, text in enumerate(("Tell me about the weather.", "And then?"), start=1):
            page.fill("#input", text)
            page.click("#send")
            page.wait_for_function(f"document.querySelectorAll('.assistant[data-done=\"1\"]').length === {n}",
                                   timeout=60_000)
        users = page.locator(".user .answer").all_inner_texts()
        answers = page.locator(".assistant .answer").all_inner_texts()
        assert users == ["Tell me about the weather.", "And then?"]
        # The bundled model's default is thinking off (it never closes a think channel): a visible answer
        assert not page.is_checked("#thinking") and all(a.strip() for a in answers)
        assert page.evaluate("window.k3chat.messages.length") == 4
        shot = tmp_path / "chat.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000


def test_tool_calls_are_shown(tool_server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        page.goto(tool_server + "/")
        page.wait_for_function("document.getElementById('model').textContent.length > 0")
        page.fill("#input", "Weather in Paris?")
        page.click("#send")
        page.wait_for_selector('.assistant[data-done="1"]', timeout=60_000)
        assert page.inner_text(".tools") == 'get_weather({"city": "Paris", "days": 2})'
        assert page.inner_text(".reasoning") == "Look it up."
        browser.close()


def test_a_page_behind_an_api_key(own_llm):
    """--api-key: the page opened with ?api_key= works at once; with the key field wrong it asks for the key,
    and works once it is typed. Enter sends; Stop ends a reply early and the conversation goes on."""
    from playwright.sync_api import sync_playwright

    from k3.testing.serving import serving

    with serving(own_llm, api_key="sekret") as url, sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        page.goto(url + "/?api_key=sekret")
        page.wait_for_function("document.getElementById('model').textContent === 'default'")
        page.fill("#input", "It was a dark night")
        page.press("#input", "Enter")
        page.wait_for_selector('.assistant[data-done="1"]', timeout=60_000)
        assert page.inner_text(".assistant .answer").strip() and "error" not in page.inner_text(".assistant .answer")

        page = browser.new_page()
        page.goto(url + "/?api_key=sekret")
        page.fill("#key", "wrong")
        page.dispatch_event("#key", "change")
        page.wait_for_function("document.getElementById('model').textContent === 'enter the API key'")
        page.fill("#key", "sekret")
        page.dispatch_event("#key", "change")
        page.wait_for_function("document.getElementById('model').textContent === 'default'")
        page.evaluate("window.k3chat.maxTokens = 4000")
        page.fill("#input", "Once upon a time")
        page.press("#input", "Enter")
        page.wait_for_function("(document.querySelector('.assistant .answer') || {}).textContent > ''", timeout=60_000)
        page.click("#stop")
        page.wait_for_selector('.assistant[data-done="1"]', timeout=60_000)
        assert page.inner_text(".assistant .answer").endswith("[stopped]")
        assert page.evaluate("window.k3chat.messages.length") == 2 and not page.is_disabled("#send")
        browser.close()
