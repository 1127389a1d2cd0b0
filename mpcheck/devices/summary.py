"""Summaries of a file's classes and functions for the files that import it (placeholder)."""

from __future__ import annotations

from mpcheck.devices.values import UNK


def summarize_module(path, source, module, modname):
    return {"classes": {}, "functions": {}}


def call_summarized(interp, callee, args, kwargs, st, node):
    return UNK
