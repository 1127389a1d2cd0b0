"""The device model on patterns held-out cases and real repositories showed it missing or
crashing on: recurrent state tuples, distributions, layers aliased by two stages, loops over
devices that ignore their device, a method replaced by assignment, code libcst's own checks
refuse, and `max()` of a one-item tuple."""

from __future__ import annotations

import textwrap

from mpcheck import codes
from mpcheck.analysis import analyze

ALL = frozenset(c.code for c in codes.on_face(codes.LINT))


def findings(src: str):
    src = textwrap.dedent(src)
    r = analyze("t.py", src, ALL, "m", {})
    return sorted((f.line, f.code, f.message) for f in r.findings)


def lines(src: str):
    return [(line, code) for line, code, _ in findings(src)]


LSTMS = """
import torch
import torch.nn as nn

lo = nn.LSTM(4, 8, batch_first=True).to("cuda:0")
hi = nn.LSTM(8, 8, batch_first=True).to("cuda:1")
h, s_lo = lo(torch.randn(2, 3, 4).to("cuda:0"))
h, s_hi = hi(h.to("cuda:1"))
"""


def test_an_lstm_state_moved_elementwise_to_another_gpu_is_reported_at_the_next_call():
    got = findings(LSTMS + 's_hi = tuple(s.detach().to("cuda:0") for s in s_hi)\nout, _ = hi(h, s_hi)\n')
    assert [(line, code) for line, code, _ in got] == [(10, "MP001")]
    assert "`s_hi = tuple(t.to('cuda:1') for t in s_hi)`" in got[0][2]


def test_an_lstm_state_kept_where_it_is_is_clean():
    assert lines(LSTMS + "s_hi = tuple(s.detach() for s in s_hi)\nout, _ = hi(h, s_hi)\n") == []


def test_a_recursive_repackage_helper_takes_the_tuple_branch_of_an_lstm_state():
    helper = (
        "def repackage(state, device):\n"
        "    if isinstance(state, torch.Tensor):\n"
        "        return state.detach().to(device)\n"
        "    return tuple(repackage(s, device) for s in state)\n"
    )
    src = LSTMS + helper + 's_hi = repackage(s_hi, "cuda:0")\nout, _ = hi(h, s_hi)\n'
    assert lines(src) == [(14, "MP001")]
    assert lines(src.replace('repackage(s_hi, "cuda:0")', 'repackage(s_hi, "cuda:1")')) == []


def test_a_state_tested_against_none_is_decided_when_it_is_a_tuple():
    src = """
    import torch
    import torch.nn as nn

    rnn = nn.LSTM(4, 4).to("cuda:1")

    def step(x, state=None):
        s = state if state is not None else None
        return rnn(x.to("cuda:1"), s)

    out, st = step(torch.randn(3, 2, 4))
    out, st = step(torch.randn(3, 2, 4), tuple(t.to("cuda:0") for t in st))
    """
    assert lines(src) == [(9, "MP001")]
    assert lines(src.replace('t.to("cuda:0")', 't.to("cuda:1")')) == []


def test_distributions_live_where_their_parameters_are():
    src = """
    import torch
    from torch.distributions import Normal, kl_divergence

    mu = torch.zeros(4, device="cuda:0")
    prior_mu = torch.zeros(4, device="cuda:1")
    q = Normal(mu, mu.exp())
    p = Normal(prior_mu, prior_mu.exp())
    kl = kl_divergence(q, p)
    z = q.rsample()
    """
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(9, "MP001")]
    assert "a distribution has no `.to()`" in got[0][2]
    assert (
        lines(src.replace('prior_mu = torch.zeros(4, device="cuda:1")', 'prior_mu = torch.zeros(4, device="cuda:0")'))
        == []
    )


ALIASED = """
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))


class TwoGpu(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.tail = nn.ModuleList(encoder.blocks[2:])
        FIRST
        SECOND


model = TwoGpu(Encoder())
"""


def test_a_part_placed_before_the_whole_that_holds_it_is_undone():
    src = ALIASED.replace("FIRST", 'self.tail.to("cuda:1")').replace("SECOND", 'self.encoder.to("cuda:0")')
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(18, "MP007")]
    assert "the placement at line 17 is undone" in got[0][2]


def test_a_part_placed_after_its_whole_is_a_refinement():
    src = ALIASED.replace("FIRST", 'self.encoder.to("cuda:0")').replace("SECOND", 'self.tail.to("cuda:1")')
    assert lines(src) == []


LOOP = """
import copy

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
        template = nn.Linear(8, 8).to(devices[0])
        self.blocks = nn.ModuleList()
        for dev in devices:
            for _ in range(2):
                self.blocks.append(BUILD)
        LATER


net = Net()
"""


def test_a_loop_over_devices_that_never_uses_its_device():
    got = findings(LOOP.replace("BUILD", "copy.deepcopy(template)").replace("LATER", "pass"))
    assert [(line, code) for line, code, _ in got] == [(14, "MP017")]
    assert "all end on cuda:0" in got[0][2] and "4 `Linear` modules" in got[0][2]
    unplaced = findings(LOOP.replace("BUILD", "nn.Linear(8, 8)").replace("LATER", "pass"))
    assert [(line, code) for line, code, _ in unplaced] == [(14, "MP017")]
    assert "stay on the CPU" in unplaced[0][2]


def test_a_loop_over_devices_is_silent_when_the_device_is_used_or_the_parts_are_spread_later():
    assert lines(LOOP.replace("BUILD", "copy.deepcopy(template).to(dev)").replace("LATER", "pass")) == []
    spread = "for i, b in enumerate(self.blocks):\n            b.to(devices[i // 2])"
    assert lines(LOOP.replace("BUILD", "copy.deepcopy(template)").replace("LATER", spread)) == []
    # a count, not devices
    assert (
        lines(
            LOOP.replace("for dev in devices:", "for dev in range(2):")
            .replace("BUILD", "nn.Linear(8, 8)")
            .replace("LATER", "pass")
        )
        == []
    )


def test_a_method_replaced_by_assignment_is_no_longer_known():
    # a quantized encoder whose .to() is replaced by a no-op before the usual call (found in ostris/ai-toolkit)
    src = """
    import torch
    from transformers import T5EncoderModel

    enc = T5EncoderModel.from_pretrained("t5", device_map="auto")
    REPLACED
    enc.to("cuda:0", dtype=torch.float16)
    """
    assert lines(src.replace("REPLACED", "pass")) == [(7, "MP007")]
    assert lines(src.replace("REPLACED", "enc.to = lambda *args, **kwargs: None")) == []


def test_code_libcst_checks_refuse_but_python_runs_is_still_checked():
    # `assert(a if c else b)`: valid Python that libcst refuses when a node is rebuilt (found in locuslab/wanda)
    src = """
    import torch


    def main(args):
        assert(1 if args else 2)
        x = torch.zeros(2).to("cuda:0")
        y = x.to("cuda:1")
        return y.to("cuda:0")


    main(None)
    """
    assert lines(src) == [(9, "MP005")]


def test_max_of_a_one_item_tuple():
    # `max(topk)` with topk=(1,), the default of the usual accuracy helper (found in OpenGVLab/InternVL)
    src = """
    import torch


    def accuracy(output, topk=(1,)):
        return output.topk(max(topk), 1)


    accuracy(torch.zeros(4, 3).to("cuda:0"))
    """
    assert lines(src) == []


BEAMS = """
import torch
import torch.nn as nn


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 8).to("cuda:0")
        self.head = nn.Linear(8, 100).to("cuda:1")

    def forward(self, ids):
        ids = ids.to("cuda:0")
        return self.head(self.embed(ids).to("cuda:1"))[:, -1]


def beam_search(model, prompt, beams=3, steps=4):
    seqs = prompt.repeat_interleave(beams, dim=0).to("cuda:1")
    for _ in range(steps):
        token = model(seqs).argmax(-1, keepdim=True)
        seqs = torch.cat([seqs, token], dim=1)
    return seqs


prompt = torch.randint(1, 100, (2, 5)).to("cuda:0")
out = beam_search(model=TwoStage(), prompt=prompt)
"""


def test_ids_repeated_per_beam_and_a_loop_started_by_a_copy_are_silent():
    # the beam's ids: no MP016 (a batch-by-sequence tensor), and the first pass's round trip starts the loop (MP005)
    assert lines(BEAMS) == []


def test_an_activation_expanded_before_its_move_and_a_plain_round_trip_are_still_reported():
    src = BEAMS.replace("prompt = torch.randint(1, 100, (2, 5))", "prompt = torch.randn(2, 5)")
    assert (18, "MP016") in lines(src)
    once = BEAMS.replace(
        "    for _ in range(steps):\n        token = model(seqs).argmax(-1, keepdim=True)\n        seqs = torch.cat([seqs, token], dim=1)\n",
        "    token = model(seqs).argmax(-1, keepdim=True)\n",
    )
    assert (13, "MP005") in lines(once)


def test_a_tensor_or_none_is_that_tensor_where_it_is_used():
    src = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(4, 4).to("cuda:0")
            self.aux = nn.Linear(4, 3).to("cuda:0")
            self.head = nn.Linear(4, 3).to("cuda:1")

        def forward(self, x):
            h = self.stem(x.to("cuda:0"))
            aux = self.aux(h) if self.training else None
            return self.head(h.to("cuda:1")), aux


    logits, aux = Net()(torch.randn(2, 4))
    y = torch.randint(0, 3, (2,))
    loss = F.cross_entropy(logits, y.to("cuda:1")) + 0.3 * F.cross_entropy(aux, y.to("cuda:0"))
    """
    assert lines(src) == [(22, "MP001")]
    assert (
        lines(src.replace('F.cross_entropy(aux, y.to("cuda:0"))', 'F.cross_entropy(aux, y.to("cuda:0")).to("cuda:1")'))
        == []
    )


def test_values_put_by_a_tensor_index_must_be_on_the_buffers_gpu():
    src = """
    import torch

    prio = torch.zeros(10, device="cuda:0")
    idx = torch.arange(3, device="cuda:0")
    err = torch.randn(3, device="cuda:1")
    prio[idx] = err.abs() + 1e-3
    prio[idx] = err.max()
    prio[:3] = err
    """
    assert lines(src) == [(7, "MP001")]  # not a 0-dim value (moved by index_put_), not a slice (a copy)


def test_a_generator_draws_only_for_tensors_on_its_device():
    src = """
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, generator=g, device="cuda:1")
    y = torch.randn(2, 3, generator=g, device="cuda:1")
    z = torch.randn(2, 3, generator=g)
    p = torch.softmax(torch.randn(4, 10, device="cuda:1"), -1)
    ok = torch.multinomial(p, 1, generator=torch.Generator(device="cuda:1"))
    also_ok = torch.multinomial(p, 1, generator=torch.Generator(device="cuda:0"))  # torch checks the type only
    bad = torch.multinomial(p, 1, generator=torch.Generator())
    """
    got = findings(src)
    assert [(line, code) for line, code, _ in got] == [(5, "MP001"), (11, "MP001")]
    assert "(and at line 6)" in got[0][2] and "`torch.Generator(device='cuda:1')`" in got[0][2]


def test_a_pre_hook_registered_before_the_move_still_moves_the_inputs():
    src = """
    import torch
    import torch.nn as nn


    def attach(module, device):
        def hook(mod, args, kwargs):
            return tuple(a.to(device) for a in args), {k: v.to(device) for k, v in kwargs.items()}

        module.register_forward_pre_hook(hook, with_kwargs=True)
        return module.to(device)


    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)

        def forward(self, h, mask=None):
            pad = None if mask is None else mask == 0
            return self.layer(h, src_key_padding_mask=pad)


    stage = attach(Stage(), "cuda:0")
    out = stage(torch.randn(2, 5, 8), mask=torch.ones(2, 5))
    """
    assert lines(src) == []


def test_a_lazy_map_of_moves_dropped_as_a_statement():
    src = """
    import torch.nn as nn

    stages = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
    devices = ["cuda:0", "cuda:1"]
    STATEMENT
    """
    assert lines(src.replace("STATEMENT", "map(lambda s, d: s.to(d), stages, devices)")) == [(6, "MP018")]
    assert lines(src.replace("STATEMENT", "(s.cuda(i) for i, s in enumerate(stages))")) == [(6, "MP018")]
    assert lines(src.replace("STATEMENT", "map(nn.Module.cuda, stages)")) == [(6, "MP018")]
    assert lines(src.replace("STATEMENT", "list(map(lambda s, d: s.to(d), stages, devices))")) == []
    assert lines(src.replace("STATEMENT", "map(print, stages)")) == []  # moves nothing
