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
        page.wait_for_function("document.getElementById('model').textContent === 'default-model'")
        for n, text in enumerate(("Tell me about the weather.", "And then?"), start=1):
            page.fill("#input", text)
            page.click("#send")
            page.wait_for_function(f"document.querySelectorAll('.assistant[data-done=\"1\"]').length === {n}",
                                   timeout=60_000)
        users = page.locator(".user .answer").all_inner_texts()
        reasoning = page.locator(".assistant .reasoning").all_inner_texts()
        assert users == ["Tell me about the weather.", "And then?"]
        assert all(r.strip() for r in reasoning)          # the model's (thinking-channel) text streamed in
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
