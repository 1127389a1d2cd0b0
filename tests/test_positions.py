"""FileContext's positions (rules/context.py positions) are libcst's PositionProvider's, node for node."""

from __future__ import annotations

import textwrap

from libcst.metadata import MetadataWrapper, PositionProvider

from mpcheck import analysis
from mpcheck.rules.context import positions


def test_positions_are_those_of_the_metadata_wrapper():
    text = textwrap.dedent(
        """\
        # a comment
        import torch

        @decorated
        class Net(torch.nn.Module):
            def forward(self, x):
                y = (x +
                     1); z = y.to(
                    "cuda:1")
                return z  # done
        """
    )
    module = analysis.parse(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    got = positions(module)
    assert dict(expected) == dict(got) and len(got) > 40
