"""How data leaving a device was computed from a chain's last arrival there (pingpong._path_kind), asked
of autograd's graph on CPU tensors: passed on (joined, split, scaled), computed by a layer, or read by
another activation born on the device (a decoder's state reading the encoder output: cross-attention)."""

import torch
import torch.nn as nn

from mpcheck.runtime.checks.pingpong import _node_key, _path_kind


def _arrival():
    """A stand-in for a copy that arrived (a node of its own, as a transfer's ToCopyBackward is)."""
    a = torch.randn(4, 8, requires_grad=True).clone()
    return a, _node_key(a.grad_fn)


def test_data_only_joined_scaled_and_split_is_passed_on():
    a, key = _arrival()
    b, _ = _arrival()
    chunk = (torch.cat([a, b]) * 2.0).split(4)[0]
    assert _path_kind(chunk.grad_fn, key, {key}) == "passed"


def test_data_a_layer_computed_from_the_arrival_is_a_layers_output():
    a, key = _arrival()
    layer = nn.Linear(8, 8)
    assert _path_kind(torch.relu(layer(a)).grad_fn, key, {key}) == "layer"
    frozen = nn.Linear(8, 8).requires_grad_(False)  # no parameter in the graph: the matmul still counts
    assert _path_kind((frozen(a) + 1).grad_fn, key, {key}) == "layer"


def test_a_state_born_here_that_reads_the_arrival_is_another_activation():
    mem, key = _arrival()
    embed, q, kv = nn.Embedding(10, 8), nn.Linear(8, 8), nn.Linear(8, 8)
    x = embed(torch.tensor([1, 2, 3, 4]))  # the decoder's own input, made on this device since
    out = x + torch.softmax(q(x) @ kv(mem).t(), -1) @ mem
    assert _path_kind(out.grad_fn, key, {key}) == "born"


def test_data_that_crossed_too_is_not_born_here():
    # The decoder's state arrived too (another transfer of the pass): reading the memory makes it a layer
    # step of one of the chains, not a new activation.
    mem, key = _arrival()
    x, x_key = _arrival()
    q, kv = nn.Linear(8, 8), nn.Linear(8, 8)
    out = x + torch.softmax(q(x) @ kv(mem).t(), -1) @ mem
    assert _path_kind(out.grad_fn, key, {key, x_key}) == "layer"


def test_data_not_computed_from_the_arrival_or_without_a_graph_is_unknown():
    a, key = _arrival()
    other, _ = _arrival()
    assert _path_kind((other * 2).grad_fn, key, {key}) is None
    assert _path_kind(None, key, {key}) is None
