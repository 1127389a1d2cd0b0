"""Warnings PyTorch raises in the user's code point at the user's line, not at mpcheck's files."""

import warnings

import torch

import mpcheck


def _line_of(marker):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_a_torch_warning_under_the_debug_mode_points_at_the_users_line():
    # A C++ warning takes the innermost Python frame as its location: under the mode, mpcheck's.
    # (Not the "requires_grad=True to a scalar": PyTorch shows that one once per process.)
    t = torch.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mpcheck.debug(report=None):
            torch.tensor(t)  # warns here
        torch.tensor(t)  # and here, after the session
    copies = [w for w in caught if "copy construct from a tensor" in str(w.message)]
    assert [(w.filename, w.lineno) for w in copies] == [
        (__file__, _line_of("torch.tensor(t)  # warns here")),
        (__file__, _line_of("torch.tensor(t)  # and here")),
    ]


def test_the_redirection_is_removed_when_the_session_ends():
    before = warnings.showwarning
    with mpcheck.debug(report=None):
        assert warnings.showwarning is not before
    assert warnings.showwarning is before
