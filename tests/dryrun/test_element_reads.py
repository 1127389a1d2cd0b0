"""MP020 at run time (runtime/checks/element_reads.py): the elements of one GPU tensor read on the host one
at a time, 16 or more in one pass, and `torch.tensor(items)` of GPU tensors on every step, are reported at
their line; a tensor read whole, a loss's `.item()` each step, a few reads, host tensors and a summary made
once are not."""

from dryrun_helpers import codes_at

PROGRAM = """
import torch
import torch.nn as nn

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16).to("cuda:0")
        self.b = nn.Linear(16, 10).to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x).to("cuda:1"))

model = Tagger()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(STEPS):
    x = torch.randn(BATCH, 16, device="cuda:0")
    out = model(x)
    preds = out.argmax(1)
    READ
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(loss.item())
"""


def _run(script, dryrun_cli, read, steps=3, batch=32):
    s = script(PROGRAM.replace("READ", read).replace("STEPS", str(steps)).replace("BATCH", str(batch)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err  # a performance finding: the step runs
    return s, report


def test_elements_read_one_at_a_time_are_reported_at_their_line(script, dryrun_cli):
    for read in (
        "names = [str(p.item()) for p in preds]  # <- here",
        "names = [int(preds[i]) for i in range(len(preds))]  # <- here",
        "hits = sum(1 for p in preds if bool(p == 3))  # <- here",  # `p == 3` is its own tensor: not counted
    ):
        s, report = _run(script, dryrun_cli, read)
        got = [f for f in report["findings"] if f["code"] == "MP020"]
        if "bool(p == 3)" in read:
            assert got == [], read
            continue
        assert codes_at(report) == [("MP020", s.line("here"))], read
        f = got[0]
        assert f["devices"] == ["cuda:1", "cpu"]
        assert "on cuda:1 (32)" in f["message"] and "`t.tolist()`" in f["message"]


def test_torch_tensor_of_gpu_tensors_every_step_is_reported(script, dryrun_cli):
    s, report = _run(script, dryrun_cli, "log = torch.tensor([out[:, i].mean() for i in range(3)])  # <- here")
    assert codes_at(report) == [("MP020", s.line("here"))]
    assert "`torch.stack(...)`" in report["findings"][0]["message"]


def test_whole_reads_few_reads_host_tensors_and_once_are_silent(script, dryrun_cli):
    for read, steps, batch in (
        ("names = [str(p) for p in preds.tolist()]", 3, 32),  # the fix: one copy
        ("names = [str(p.item()) for p in preds]", 3, 15),  # fewer than 16 elements in a pass
        ("names = [str(p.item()) for p in preds.cpu()]", 3, 32),  # read on the host
        ("first = preds[0].item()", 40, 32),  # one element per pass, over many passes
        ("log = torch.tensor([out[:, i].mean() for i in range(3)])", 1, 32),  # once: a summary
        ("log = torch.tensor([out[0, 0], out[0, 1].cpu()])", 3, 32),  # a GPU's and the host's
    ):
        _, report = _run(script, dryrun_cli, read, steps, batch)
        assert [f for f in report["findings"] if f["code"] == "MP020"] == [], read


VALUES = """
import torch
import torch.nn as nn

model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(12)]).to("cuda:0")
for step in range(2):
    out = model(torch.randn(2, 4, device="cuda:0")).sum()
    out.backward()
    READ
"""


def test_one_line_reading_a_value_per_parameter_is_mp020(script, dryrun_cli):
    s = script(
        VALUES.replace("READ", "stats = {n: p.grad.norm().item() for n, p in model.named_parameters()}  # <- read")
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP020", s.line("read"))], err


def test_one_copy_of_the_stacked_values_and_a_loss_read_each_step_are_clean(script, dryrun_cli):
    read = "stats = torch.stack([p.grad.norm() for p in model.parameters()]).tolist(); print(out.item())"
    status, report, err = dryrun_cli(script(VALUES.replace("READ", read)), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_small_rows_read_one_at_a_time_are_reported_and_a_whole_read_or_large_chunks_are_not(script, dryrun_cli):
    # Round 27's t17: a batch's top-5 labels read row by row, one wait for the GPU per row.
    s, report = _run(script, dryrun_cli, "labels = [r.tolist() for r in out.topk(5, dim=1).indices]  # <- here")
    assert codes_at(report) == [("MP020", s.line("here"))]
    assert (
        "(32x5)" in report["findings"][0]["message"] and "`.tolist()` of 5 elements" in report["findings"][0]["message"]
    )
    for read in (
        "labels = out.topk(5, dim=1).indices.tolist()",  # the fix: one copy
        "labels = [r.tolist() for r in out.topk(5, dim=1).indices.cpu()]",  # rows of a host copy
        "big = torch.zeros(16, 20000, device='cuda:1'); parts = [c.tolist() for c in big]",  # 80 KB rows
    ):
        _, report = _run(script, dryrun_cli, read)
        assert [f for f in report["findings"] if f["code"] == "MP020"] == [], read


def test_a_value_computed_from_each_indexed_element_and_read_is_a_read_of_the_elements(script, dryrun_cli):
    # (probe36 t07: `if usage[k] == 0:` for each code of a VQ codebook) a comparison per element, each read
    s, report = _run(script, dryrun_cli, "hits = sum(1 for i in range(len(preds)) if preds[i] == 3)  # <- here")
    assert codes_at(report) == [("MP020", s.line("here"))]
    assert "on cuda:1 (32)" in report["findings"][0]["message"]
    assert "`bool()` of a value computed from a single element" in report["findings"][0]["message"]
    # (probe37 t18: `if dones[t].any():` for each time step) a value computed from each row picked by a number
    s, report = _run(script, dryrun_cli, "hits = sum(1 for i in range(len(out)) if out[i].max() > 0)  # <- here")
    assert codes_at(report) == [("MP020", s.line("here"))]
    assert "`bool()` of a value computed from one row" in report["findings"][0]["message"]
    for read in (
        "hits = sum(1 for i in range(15) if preds[i] == 3)",  # fewer than 16 in a pass
        "hits = sum(1 for m in out.max(1).values.tolist() if m > 0)",  # the fix of the rows' reads
        "hits = sum(1 for i, p in enumerate(preds.tolist()) if p == 3)",  # the fix: one copy
        "k = 0\n    while k < 20 and out.sum() > k:\n        k += 1",  # a loop's own test, no element of anything
    ):
        _, report = _run(script, dryrun_cli, read)
        assert [f for f in report["findings"] if f["code"] == "MP020"] == [], read


MONITORED = """
import torch
import torch.nn as nn

model = nn.Sequential(
    nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
    nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
)
model[:4].to("cuda:0")
model[4:].to("cuda:1")
model[4].register_forward_pre_hook(lambda m, args: (args[0].to("cuda:1"),))
history = []
state = {"step": 0}


def hook(module, inputs, output):
    READ


for m in model:
    if isinstance(m, nn.ReLU):
        m.register_forward_hook(hook)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(STEPS):
    state["step"] = step
    loss = model(torch.randn(32, 64, device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _monitored(script, dryrun_cli, read, steps=3):
    s = script(MONITORED.replace("READ", read).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, [(f["code"], f["line"]) for f in report["findings"]], report


def test_a_module_hook_reading_a_value_at_every_layer_is_mp020(script, dryrun_cli):
    # (probe36 t23) a dead-unit monitor: `.item()` in a forward hook on each ReLU waits for the GPU 4 times a pass
    s, found, report = _monitored(script, dryrun_cli, "history.append((output == 0).float().mean().item())  # <- read")
    assert found == [("MP020", s.line("read"))]
    assert "a module hook reads a value on cuda:" in report["findings"][0]["message"]


def test_a_hook_keeping_its_values_on_the_gpu_or_reading_them_every_n_steps_is_clean(script, dryrun_cli):
    for read, steps in (
        ("history.append((output == 0).float().mean().detach())", 3),  # the fix: read once after the run
        ("if state['step'] % 10 == 0:\n        history.append((output == 0).float().mean().item())", 12),
        ("history.append((output == 0).float().mean().item())", 1),  # one pass: no per-step cost known yet
    ):
        _, found, _ = _monitored(script, dryrun_cli, read, steps)
        assert found == [], read


SCALED = """
import torch
import torch.nn as nn


class Scaled(nn.Linear):
    def forward(self, x):
        READ
        return USE


layers = [Scaled(64, 64) for _ in range(8)]
for i, layer in enumerate(layers):
    layer.to(f"cuda:{i // 4}")
model = nn.Sequential(*layers)
model[4].register_forward_pre_hook(lambda m, args: (args[0].to("cuda:1"),))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(STEPS):
    loss = model(torch.randn(32, 64, device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _scaled(script, dryrun_cli, read, use, steps=3):
    s = script(SCALED.replace("READ", read).replace("USE", use).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, [(f["code"], f["line"]) for f in report["findings"]], report


def test_a_number_read_in_every_layer_and_handed_back_to_gpu_arithmetic_is_mp020(script, dryrun_cli):
    # (probe37 t29) an XNOR-Net scale: `.item()` in each layer's forward, then `out * alpha` on the same GPU
    for read, use in (
        ("alpha = self.weight.abs().mean().item()  # <- read", "super().forward(x) * alpha"),
        ("alpha = float(self.weight.abs().mean())  # <- read", "torch.clamp(super().forward(x), max=alpha)"),
        ("pass  # <- read", "super().forward(x).mul(self.weight.abs().mean().item())"),
    ):
        s, found, report = _scaled(script, dryrun_cli, read, use)
        line = s.line("read") + (1 if read.startswith("pass") else 0)
        assert found == [("MP020", line)], (read, use)
        assert "goes straight back to arithmetic on cuda:" in report["findings"][0]["message"]
        assert report["findings"][0]["modules"][0].startswith("model.")


def test_a_number_read_for_the_host_kept_as_a_tensor_or_read_in_one_pass_is_clean(script, dryrun_cli):
    for read, use, steps in (
        ("alpha = self.weight.abs().mean().detach()", "super().forward(x) * alpha", 3),  # the fix
        ("alpha = self.weight.abs().mean().item()", "super().forward(x) * alpha", 1),  # one pass: cost not known
        # the host needs the number too: a branch, a formatted log
        ("alpha = self.weight.abs().mean().item()", "super().forward(x) * alpha if alpha > 0 else x", 3),
        ("alpha = self.weight.abs().mean().item()\n        print(f'{alpha:.3f}')", "super().forward(x) * alpha", 3),
        ("alpha = self.weight.abs().mean().item()", "super().forward(x) * alpha / max(alpha, 1.0)", 3),  # host use
        ("n = self.weight.shape[0]", "super().forward(x) * n", 3),  # a number that never was on a GPU
    ):
        _, found, _ = _scaled(script, dryrun_cli, read, use, steps)
        assert found == [], (read, use)


CLIPPED = """
import torch
import torch.nn as nn


class Clipped(nn.Linear):
    def forward(self, x):
        h = super().forward(x)
        TEST
        return h


model = nn.Sequential(*[Clipped(64, 64) for _ in range(8)])
model[:4].to("cuda:0")
model[4:].to("cuda:1")
model[4].register_forward_pre_hook(lambda m, args: (args[0].to("cuda:1"),))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    loss = model(torch.randn(32, 64, device="cuda:0")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _clipped(script, dryrun_cli, test):
    s = script(CLIPPED.replace("TEST", test))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, [(f["code"], f["line"]) for f in report["findings"]], report


def test_a_test_in_every_layer_that_only_guards_a_clamp_is_mp020(script, dryrun_cli):
    # (probe34 t28) `h.clamp(-c, c) if bool(h.abs().amax() > c) else h` in every block: a wait per block for a clamp
    # that changes nothing where the test is false (HF's T5 once did the same with `isinf(h).any()`)
    for test in (
        "h = h.clamp(-3.0, 3.0) if bool(h.abs().amax() > 3.0) else h  # <- test",
        "if torch.isnan(h).any():  # <- test\n            h = torch.nan_to_num(h)",
        "if (h < 0.5).any():  # <- test\n            h = torch.clamp(h, min=0.5)",
    ):
        s, found, report = _clipped(script, dryrun_cli, test)
        assert found == [("MP020", s.line("test"))], test
        assert "only to decide whether to run `" in report["findings"][0]["message"]


def test_a_test_whose_branch_does_more_than_a_clamp_or_tests_something_else_is_clean(script, dryrun_cli):
    for test in (
        "h = h.clamp(-3.0, 3.0)",  # the fix
        "h = h.clamp(min=0.0) if bool(h.mean() > 0.0) else h",  # false test, values below 0 kept: not the same
        "h = h.clamp(-3.0, 3.0) if bool(h.abs().amax() > 5.0) else h",  # a test of another bound
        "if bool(h.abs().amax() > 3.0):\n            h = h.clamp(-3.0, 3.0) * 0.5",  # work of its own
        "if bool(h.abs().amax() > 3.0):\n            return h.clamp(-3.0, 3.0)",  # an early exit
    ):
        _, found, _ = _clipped(script, dryrun_cli, test)
        assert found == [], test


def test_spans_drawn_on_the_gpu_and_read_with_int_one_at_a_time_are_mp020(script, dryrun_cli):
    # SpecAugment drawing each mask's width on the GPU: `int()` of one-value tensors of their own, 32 a pass from one
    # line; drawn on the host (`device="cpu"`) no read waits.
    program = """
import torch
import torch.nn as nn

net = nn.Linear(40, 8).to("cuda:1")
for step in range(2):
    feats = torch.randn(16, 160, 40).to("cuda:0")
    for i in range(feats.shape[0]):
        for _ in range(2):
            width = int(torch.randint(0, 9, (), device=RNG))  # <- read
            feats[i, :, :width].zero_()
    net(feats.to("cuda:1")).sum().backward()
print("done")
"""
    s = script(program.replace("RNG", '"cuda:0"'))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP020", s.line("read"))]
    assert "`int()`" in report["findings"][0]["message"]
    status, report, err = dryrun_cli(script(program.replace("RNG", '"cpu"')), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
