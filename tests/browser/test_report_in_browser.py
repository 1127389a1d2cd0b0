"""The HTML report of examples/split_model.py (a dry run on 2 virtual GPUs) in a real browser:
headless Chromium from the operating system's packages, driven by Playwright (never a browser of
its own). No console error; devices, modules, crossings and findings on the page; keyboard and
screen-reader labels; a screenshot kept in test-artifacts/.

Skipped, with the reason, where Chromium or Playwright is missing; under CI (CI=true) a missing
browser fails instead, since .ci/run installs both."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("MPCHECK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# No network, no first-run work, no profile of the user's: a fresh --user-data-dir per test.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.browser


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the python package playwright is not installed (pip install -e '.[test]')"
    if not os.path.exists(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture
def browser_page():
    reason = _missing()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI installs the browser, yet: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="mpcheck-chromium-")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1100, "height": 900},
            offline=True,
        )
        try:
            page = ctx.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            yield page, problems
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def test_the_report_of_the_example_renders_in_chromium(browser_page, tmp_path, capsys):
    from mpcheck.runtime.commands.dryrun import main

    page, problems = browser_page
    html = tmp_path / "report.html"
    assert main(["--gpus", "2", "--html", str(html), str(ROOT / "examples" / "split_model.py")]) == 1
    capsys.readouterr()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html.as_uri())
    page.wait_for_load_state("load")

    # devices: one lane each, named for screen readers
    for dev in ("cuda:0", "cuda:1"):
        lane = page.get_by_role("region", name=f"device {dev}:")
        assert lane.is_visible()
        assert lane.get_by_role("heading", name=dev).is_visible()
    # modules: the blocks on their devices, parameter bytes beside them
    assert page.locator('#lane-cuda\\:0 [data-path="model.blocks.0"]').is_visible()
    assert page.locator('#lane-cuda\\:1 [data-path="model.head"]').is_visible()
    # crossings: drawn (focusable, labelled) and in the table
    arc = page.get_by_role("img", name="cuda:0 to cuda:1, forward:")
    assert arc.count() == 1
    arc.focus()
    assert page.locator("tr.hi").inner_text().split()[:3] == ["cuda:0", "cuda:1", "forward"]
    assert page.get_by_role("img", name="cuda:1 to cuda:0, backward:").count() == 1
    # findings: listed with rule, user line and fix; pinned on their module; the jump opens it
    findings = page.locator("li.finding")
    assert findings.count() == 2
    text = findings.first.inner_text()
    assert "MP001" in text and "split_model.py:47" in text and "fix:" in text
    assert page.locator('#lane-cuda\\:1 a.pin:has-text("MP001")').count() == 1
    page.get_by_role("button", name="show module model.blocks.1").click()
    assert page.locator('[id="m-model.blocks.1"]').evaluate("n => n.classList.contains('hi-node')")
    # keyboard: Tab reaches the controls
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement && document.activeElement.tagName") != "BODY"
    # the timeline of the step's transfers
    assert page.get_by_role("group", name="timeline of transfers").is_visible()

    ARTIFACTS.mkdir(exist_ok=True)
    page.get_by_role("button", name="collapse all").click()
    page.screenshot(path=str(ARTIFACTS / "report-split_model.png"), full_page=True)
    assert (ARTIFACTS / "report-split_model.png").stat().st_size > 10_000
    assert problems == []
    assert all(u.startswith("file://") for u in requests)  # nothing but the file itself
