"""Helpers shared by the dry-run tests (a module name of its own: tests/runtime has a conftest too)."""


def codes_at(report):
    """(code, line) of every finding in a JSON report, sorted."""
    return sorted((f["code"], f["line"]) for f in report["findings"])
