"""A finding made inside an installed library (transformers' modeling files, accelerate's hooks)
points at the user's line that called into it, naming the library's line as context (issue 9)."""

import os
import sys
import textwrap
import threading

import pytest
import torch

import mpcheck
from mpcheck.runtime.checks import sites
from mpcheck.runtime.checks.findings import DeviceMismatchError

LIBRARY = """
import torch
from torch import nn


class Stage(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.lin = nn.Linear(4, 4, device=device)

    def forward(self, x):
        return self.lin(x)


class FakeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Stage("cpu")
        self.second = Stage("meta")

    def forward(self, x):
        h = self.first(x)
        return self.second(h)  # library line: the transfer is missing here


def combine(a, b):
    return a + b  # library helper


def record_site(out):
    out.append(mpcheck_sites.user_site(0))  # library site: this frame is the innermost
"""


@pytest.fixture
def fakelib(tmp_path, monkeypatch):
    """A package installed into a site-packages folder of its own, on sys.path."""
    pkg = tmp_path / "lib" / "python3" / "site-packages" / "fakelib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "modeling_fake.py").write_text(
        "from mpcheck.runtime.checks import sites as mpcheck_sites\n" + textwrap.dedent(LIBRARY)
    )
    monkeypatch.syspath_prepend(str(pkg.parent))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    monkeypatch.delitem(sys.modules, "fakelib.modeling_fake", raising=False)
    import fakelib.modeling_fake as mod

    return mod


def _lib_line(mod, marker):
    return _line_of(mod.__file__, marker)


def _line_of(path, marker):
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def test_a_mismatch_inside_a_library_model_points_at_the_users_call(fakelib):
    model = fakelib.FakeModel()
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(model, report=None):
            model(torch.randn(2, 4))  # user line
    f = err.value.finding
    assert f.path == sites.shown_path(__file__)  # relative to the folder pytest started in
    assert f.line == _line_of(__file__, "model(torch.randn(2, 4))  # user line")
    context = f"fakelib/modeling_fake.py:{_lib_line(fakelib, 'library line')}"
    assert f.extra["library_site"] == context and f.message.endswith(f"(in {context})")


def test_a_mismatch_in_a_library_helper_points_at_the_users_call(fakelib):
    with pytest.raises(DeviceMismatchError) as err:
        with mpcheck.debug(report=None):
            fakelib.combine(torch.ones(2, 4), torch.ones(2, 4, device="meta"))  # user line
    f = err.value.finding
    assert (f.path, f.line) == (
        sites.shown_path(__file__),
        _line_of(__file__, 'fakelib.combine(torch.ones(2, 4), torch.ones(2, 4, device="meta"))  # user line'),
    )
    assert f.extra["library_site"] == f"fakelib/modeling_fake.py:{_lib_line(fakelib, 'library helper')}"


def test_with_only_library_frames_the_library_frame_is_kept(fakelib):
    # A thread started by the library: threading's own frames are skipped, then only library code.
    got = []
    t = threading.Thread(target=fakelib.record_site, args=(got,))
    t.start()
    t.join()
    (site,) = got
    assert site.path == fakelib.__file__ and site.context is None
    assert site.line == _lib_line(fakelib, "library site")


def test_a_site_with_a_library_context_is_the_same_site():
    a = sites.Site("train.py", 3, "main")
    b = sites.Site("train.py", 3, "main", "transformers/models/t5/modeling_t5.py:123")
    assert a == b and hash(a) == hash(b) and str(b) == "train.py:3"


def test_a_path_under_the_base_folder_is_shown_relative_to_it(tmp_path):
    base = str(tmp_path / "project")
    inside = os.path.join(base, "pkg", "model.py")
    assert sites.shown_path(inside, base) == os.path.join("pkg", "model.py")
    outside = str(tmp_path / "elsewhere" / "model.py")
    assert sites.shown_path(outside, base) == outside  # never "../elsewhere/model.py"
    sibling = str(tmp_path / "project2" / "model.py")  # a shared prefix is not "under"
    assert sites.shown_path(sibling, base) == sibling
    assert sites.shown_path("train.py", base) == "train.py"  # a script named as given stays so
    assert sites.shown_path("<stdin>", base) == "<stdin>"
