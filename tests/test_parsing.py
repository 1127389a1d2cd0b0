"""mpcheck.parsing: libcst's parser with parse-time node constructors gives libcst's own trees,
and every node class has its own constructor (validating, frozen) again after a parse."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import libcst as cst
import pytest
from libcst._nodes.base import CSTNode

from mpcheck import parsing

ROOT = Path(__file__).resolve().parent.parent


def _real_files() -> list[Path]:
    """Real code of every shape at hand: mpcheck's own, its fixtures, libcst's own."""
    files = sorted((ROOT / "mpcheck").rglob("*.py")) + sorted((ROOT / "tests" / "fixtures").rglob("*.py"))
    files += sorted(Path(cst.__file__).parent.rglob("*.py"))
    return files


def test_the_trees_are_libcsts_own():
    files = _real_files()
    assert len(files) > 300
    compared = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            want = cst.parse_module(text)
        except cst.ParserSyntaxError:
            with pytest.raises(cst.ParserSyntaxError):
                parsing.parse(text)
            continue
        got = parsing.parse(text)
        assert got.deep_equals(want), path
        assert got.code == text, path
        compared += 1
    assert compared > 300


def test_every_node_class_gets_a_parse_time_constructor_with_the_same_parameters():
    constructors = parsing._constructors(CSTNode)
    public = {
        obj
        for obj in vars(cst).values()
        if isinstance(obj, type) and issubclass(obj, CSTNode) and dataclasses.is_dataclass(obj) and obj is not CSTNode
    }
    public = {cls for cls in public if not inspect.isabstract(cls)}
    assert public and public <= constructors.keys()
    for cls, (own, fast) in constructors.items():
        mine = inspect.signature(fast).parameters
        theirs = inspect.signature(own).parameters
        assert [(p.name, p.kind) for p in mine.values()] == [(p.name, p.kind) for p in theirs.values()], cls
        assert [p.default is p.empty for p in mine.values()] == [p.default is p.empty for p in theirs.values()], cls


def test_defaults_and_default_factories_are_the_dataclasses():
    checked = 0
    for cls, (own, fast) in parsing._constructors(CSTNode).items():
        fields = dataclasses.fields(cls)
        if any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields):
            continue  # a required field: nothing to compare without building valid children
        built_own = object.__new__(cls)
        own(built_own)
        built_fast = object.__new__(cls)
        fast(built_fast)
        for f in fields:
            mine, theirs = getattr(built_fast, f.name), getattr(built_own, f.name)
            assert mine.deep_equals(theirs) if isinstance(theirs, CSTNode) else mine == theirs, (cls, f.name)
            if f.default_factory is not dataclasses.MISSING:  # a fresh value each time, as the dataclass makes
                again = object.__new__(cls)
                fast(again)
                mutable = not isinstance(getattr(again, f.name), (str, tuple, frozenset, type(None)))
                assert not mutable or getattr(again, f.name) is not getattr(built_fast, f.name)
        checked += 1
    assert checked > 50  # operators, brackets, whitespace


@pytest.mark.parametrize("source", ["x = f(1)\n", "def broken(:\n"])
def test_after_a_parse_nodes_are_checked_and_frozen_again(source):
    try:
        parsing.parse(source)
    except cst.ParserSyntaxError:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")  # libcst's own check: an empty name
    node = cst.Name("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.value = "y"  # type: ignore[misc]
    for cls, (own, _) in parsing._constructors(CSTNode).items():
        assert cls.__dict__["__init__"] is own, cls


def test_a_file_that_does_not_parse_fails_as_in_libcst():
    with pytest.raises(cst.ParserSyntaxError) as theirs:
        cst.parse_module("def broken(:\n")
    with pytest.raises(cst.ParserSyntaxError) as mine:
        parsing.parse("def broken(:\n")
    assert str(mine.value) == str(theirs.value)
    assert parsing.parse_or_none("def broken(:\n") is None
