"""Fixtures shared by the lint-pipeline tests (test_cli, test_cache, test_noqa)."""

from __future__ import annotations

import pytest
from lint_fakes import CALLS, FAKE_RULES, fake_analyze, fake_summarize

from mpcheck import analysis
from mpcheck.lint import fix, rulemeta


@pytest.fixture
def fake_rules(monkeypatch):
    """Install the fake rules in this process (worker processes are forked, so they inherit them)."""
    monkeypatch.setattr(rulemeta, "_from_registry", lambda: list(FAKE_RULES))
    monkeypatch.setattr(rulemeta, "_FINGERPRINT", "test-fake")
    monkeypatch.setattr(analysis, "analyze", fake_analyze)
    monkeypatch.setattr(analysis, "summarize", fake_summarize)
    # The pipeline re-analyses a file once per fixable finding to offer only fixes that
    # work; the fake fixes are checked by --fix alone, so that CALLS counts one analysis
    # per file (tests/test_fix.py checks the offer with the real rules).
    monkeypatch.setattr(fix, "verified_fixes", lambda path, text, found, recheck: found)
    CALLS["analyze"].clear()
    CALLS["summarize"].clear()
    return CALLS
