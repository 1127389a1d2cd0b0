"""Session 38: a hand-written optimizer given `list(a.parameters()) + list(b.parameters())`, the gradients a
custom autograd Function's backward returns, gradient hooks (`w.register_hook`), and torch.cuda queries about
the current GPU asked once per GPU (MP017)."""

from __future__ import annotations

from lint_helpers import findings, lines

# ----------------------------------------------------------------- an optimizer of the file over two lists

LARS = """
import torch
import torch.nn as nn


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))
        first = self.param_groups[0]["params"][0]
        self.one = torch.ones((), device=ONE)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                q = torch.where(p.norm() > 0, p.norm(), self.one)
                p.mul_(q)


def main():
    a = nn.Linear(4, 4).to("cuda:0")
    b = nn.Linear(4, 4).to("cuda:1")
    opt = LARS(list(a.parameters()) + list(b.parameters()), lr=0.1)
    opt.step()


main()
"""


def test_a_constant_on_the_first_parameters_gpu_meets_every_parameter_of_a_two_list_optimizer():
    got = findings(LARS.replace("ONE", "first.device"), "MP001")
    assert [f.line for f in got] == [16]
    assert "cuda:0" in got[0].message and "cuda:1" in got[0].message


def test_a_constant_on_the_cpu_mixes_with_every_gpu():
    # A 0-dim CPU tensor joins any device's op; so does one made per parameter.
    assert lines(LARS.replace("ONE", "'cpu'"), "MP001") == []
    per_param = LARS.replace("self.one)", "torch.ones((), device=p.device))").replace("ONE", "first.device")
    assert lines(per_param, "MP001") == []


def test_the_first_item_of_two_parameter_lists_is_the_first_lists_first():
    src = """
    import torch
    import torch.nn as nn
    a = nn.Linear(4, 4).to("cuda:0")
    b = nn.Linear(4, 4).to("cuda:1")
    params = list(a.parameters()) + list(b.parameters())
    x = torch.ones(3, device="cuda:1") + torch.ones(3, device=params[0].device)
    y = torch.ones(3, device="cuda:0") + torch.ones(3, device=params[0].device)
    """
    assert lines(src, "MP001") == [7]


# ----------------------------------------------------------------- a custom Function's returned gradient

HOP = """
import torch
import torch.nn as nn


class Hop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, device):
        ctx.src = x.device
        return x.to(device)

    @staticmethod
    def backward(ctx, grad_out):
        return GRAD, None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4).to("cuda:0")
        self.b = nn.Linear(4, 4).to("cuda:1")

    def forward(self, x):
        return self.b(Hop.apply(self.a(x.to("cuda:0")), "cuda:1"))


Net()(torch.randn(2, 4)).sum().backward()
"""


def test_a_hop_function_whose_backward_returns_the_gradient_unmoved_is_reported_with_its_fix():
    got = findings(HOP.replace("GRAD", "grad_out"), "MP001")
    assert [f.line for f in got] == [14]
    f = got[0]
    assert "`Hop.backward` returns `grad_out` on cuda:1" in f.message and "on cuda:0" in f.message
    assert "invalid gradient at index 0" in f.message and "grad_out.to(ctx.src)" in f.message
    assert f.fix is not None and f.fix.replacement == "grad_out.to(ctx.src)"


def test_a_hop_function_that_sends_the_gradient_back_is_silent():
    assert findings(HOP.replace("GRAD", "grad_out.to(ctx.src)"), "MP001") == []


def test_without_the_saved_device_the_fix_is_only_said():
    src = HOP.replace("GRAD", "grad_out").replace("        ctx.src = x.device\n", "")
    got = findings(src, "MP001")
    assert [f.line for f in got] == [13]
    assert got[0].fix is None and "ctx.device = x.device" in got[0].message


def test_a_function_applied_on_one_gpu_or_to_host_data_is_silent():
    same = HOP.replace("GRAD", "grad_out").replace(', "cuda:1"))', ', "cuda:0"))')
    assert (
        findings(
            same.replace('self.b = nn.Linear(4, 4).to("cuda:1")', 'self.b = nn.Linear(4, 4).to("cuda:0")'), "MP001"
        )
        == []
    )
    # Raw data from the host wants no gradient: autograd never checks one for it.
    host = HOP.replace("GRAD", "grad_out").replace(
        'Hop.apply(self.a(x.to("cuda:0")), "cuda:1")', 'self.a(Hop.apply(x, "cuda:0")).to("cuda:1")'
    )
    assert findings(host, "MP001") == []


# ----------------------------------------------------------------- gradient hooks

HOOKS = """
import torch
import torch.nn as nn

a = nn.Linear(4, 4).to("cuda:0")
b = nn.Linear(4, 4).to("cuda:1")
keep = torch.zeros(4, 1, device="cuda:0")
a.weight.register_hook(lambda g: g * keep)
b.weight.register_hook(lambda g: g * MASK)
"""


def test_a_gradient_hook_meets_its_mask_on_another_gpu():
    got = findings(HOOKS.replace("MASK", "keep"), "MP001")
    assert [f.line for f in got] == [9]
    assert "cuda:0" in got[0].message and "cuda:1" in got[0].message


def test_gradient_hooks_with_the_mask_moved_to_the_gradient_are_silent():
    assert findings(HOOKS.replace("MASK", "keep.to(g.device)"), "MP001") == []
    named = HOOKS.replace(
        "b.weight.register_hook(lambda g: g * MASK)",
        "def mask(g):\n    return g * keep.to(g.device)\nb.weight.register_hook(mask)",
    )
    assert findings(named, "MP001") == []


# ----------------------------------------------------------------- MP017: the current GPU asked once per GPU

PICK = """
import torch


def pick_gpu():
    free = [QUERY[0] for i in range(torch.cuda.device_count())]
    return max(range(len(free)), key=free.__getitem__)
"""


def test_a_per_gpu_query_without_the_loops_device_is_reported():
    got = findings(PICK.replace("QUERY", "torch.cuda.mem_get_info()"), "MP017")
    assert [f.line for f in got] == [6]
    assert "`torch.cuda.mem_get_info(i)`" in got[0].message
    loop = "import torch\nfor d in range(n_gpus):\n    print(torch.cuda.memory_allocated())\n"
    assert lines(loop, "MP017") == [3]


def test_per_gpu_queries_given_the_device_or_outside_a_gpu_loop_are_silent():
    assert findings(PICK.replace("QUERY", "torch.cuda.mem_get_info(i)"), "MP017") == []
    in_context = "import torch\nfor i in range(torch.cuda.device_count()):\n    with torch.cuda.device(i):\n        print(torch.cuda.memory_allocated())\n"
    assert findings(in_context, "MP017") == []
    epochs = "import torch\nfor epoch in range(10):\n    print(torch.cuda.max_memory_allocated())\n"
    assert findings(epochs, "MP017") == []
    unused = "import torch\nfree = [torch.cuda.mem_get_info()[0] for _ in range(torch.cuda.device_count())]\n"
    assert findings(unused, "MP017") == []


# ----------------------------------------------------------------- precision round 25

ASPP = """
import torch
import torch.nn as nn


class ASPP(nn.Module):
    def __init__(self, cin, c):
        super().__init__()
        self.branches = nn.ModuleList(nn.Conv2d(cin, c, 3, padding=r, dilation=r) for r in (1, 2))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, c, 1))

    def forward(self, x):
        pooled = self.pool(x).expand(-1, -1, x.size(2), x.size(3))
        return torch.cat([b(x) for b in self.branches] + [pooled], 1)


class Seg(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, 32, 3, 2, 1).to("cuda:0")
        self.head = HEAD.to("cuda:1")

    def forward(self, img):
        return self.head(self.backbone(img.to("cuda:0")).to("cuda:1"))


Seg()(torch.randn(2, 3, 16, 16))
"""


def test_a_tensor_the_head_pools_and_also_convolves_must_cross_whole():
    assert findings(ASPP.replace("HEAD", "ASPP(32, 16)"), "MP016") == []
    # Given straight to a pool, it still crosses at full size for the few elements the pool keeps.
    assert lines(ASPP.replace("HEAD", "nn.AdaptiveAvgPool2d(2)"), "MP016") == [24]


EPOCHS = """
import torch
import torch.nn as nn

model = nn.Linear(8, 2).to("cuda:1")
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def synth(n):
    return torch.randn(n, 8), torch.randint(0, 2, (n,))


x, y = synth(96)
xv, yv = synth(48)
for epoch in range(3):
    for s in range(0, 96, 32):
        loss = nn.functional.cross_entropy(model(x[s : s + 32].to("cuda:1")), y[s : s + 32].to("cuda:1"))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(xv.to("cuda:1")).argmax(1) == yv.to("cuda:1")).float().mean()
"""


def test_a_validation_set_moved_once_per_epoch_beside_the_steps_is_no_repeat():
    assert findings(EPOCHS, "MP011") == []
    # The same copy inside the steps' loop is one per step.
    per_step = EPOCHS.replace("opt.step()\n", "opt.step()\n        model(xv.to('cuda:1'))\n")
    assert lines(per_step, "MP011") == [21]


# ----------------------------------------------------------------- foreach kernels pair lists by index

FOREACH = """
import torch
import torch.nn as nn

online = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
target = TARGET
t_params = list(target.parameters())
o_params = [p.detach() for p in online.parameters()]
torch._foreach_lerp_(t_params, o_params, 0.1)
torch._foreach_add_(o_params, o_params)
"""


def test_a_target_kept_on_one_gpu_lerped_toward_a_split_models_parameters_is_reported():
    got = findings(FOREACH.replace("TARGET", 'nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)).to("cuda:1")'), "MP001")
    assert [f.line for f in got] == [9]
    assert "torch._foreach_lerp_" in got[0].message and "cuda:0" in got[0].message and got[0].fix is None


def test_lists_that_pair_each_parameter_with_its_own_gpu_are_silent():
    assert (
        findings(
            FOREACH.replace("TARGET", "copy.deepcopy(online)").replace(
                "import torch\n", "import copy\nimport torch\n", 1
            ),
            "MP001",
        )
        == []
    )


def test_one_found_inf_for_the_gradients_of_every_gpu_is_reported():
    src = """
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    found = torch.zeros(1, device="cuda:0")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones(1, device="cuda:0"))
    """
    assert lines(src, "MP001") == [8]
    one_gpu = src.replace('nn.Linear(4, 4).to("cuda:1")', 'nn.Linear(4, 4).to("cuda:0")')
    assert findings(one_gpu, "MP001") == []


# ----------------------------------------------------------------- placements in the environment


def test_a_gpu_setting_beside_a_list_of_gpus_in_the_environment_is_read_with_it():
    src = """
    import os
    import torch
    import torch.nn as nn

    ONLINE = [int(g) for g in os.environ.get("BYOL_ONLINE_GPUS", "0,1").split(",")]
    TARGET_GPU = int(os.environ.get("BYOL_TARGET_GPU", "1"))
    a = nn.Linear(4, 4).to(f"cuda:{ONLINE[0]}")
    t = nn.Linear(4, 4).to(f"cuda:{TARGET_GPU}")
    y = t(a(torch.randn(2, 4).to(f"cuda:{ONLINE[0]}")))
    """
    assert lines(src, "MP001") == [10]


JSON_PLACEMENT = """
import json
import os

import torch
import torch.nn as nn

PLACEMENT = json.loads(os.environ.get("FLOW_PLACEMENT", '{"encoder": "cuda:0", "decoder": "cuda:1"}'))
enc = nn.Linear(4, 4).to(PLACEMENT["encoder"])
dec = nn.Linear(4, 4).to(PLACEMENT["decoder"])
y = dec(HOP)
"""


def test_a_placement_read_from_a_json_default_is_known():
    assert lines(JSON_PLACEMENT.replace("HOP", 'enc(torch.randn(2, 4).to(PLACEMENT["encoder"]))'), "MP001") == [11]
    moved = 'enc(torch.randn(2, 4).to(PLACEMENT["encoder"])).to(PLACEMENT["decoder"])'
    assert findings(JSON_PLACEMENT.replace("HOP", moved), "MP001") == []


def test_a_json_literal_counts_for_the_pre_filter_and_prose_does_not():
    from mpcheck.lint.livetext import LiveText

    assert LiveText("""P = json.loads('{"enc": "cuda:0", "dec": "cuda:1"}')\n""").has("cuda")
    assert LiveText("""P = json.loads('["cuda:0", "cuda:1"]')\n""").has("cuda")
    assert not LiveText("raise ValueError('no cuda device here')\n").has("cuda")
    assert not LiveText("HELP = '{see the cuda docs}'\n").has("cuda")


# ----------------------------------------------------------------- a comprehension over every group's parameters

SAM_NORM = """
import torch
import torch.nn as nn


class SAM(torch.optim.Optimizer):
    def __init__(self, params, rho=0.05):
        super().__init__(params, dict(rho=rho))

    def grad_norm(self):
        norms = [NORM for group in self.param_groups for p in group["params"] if p.grad is not None]
        return torch.norm(torch.stack(norms), p=2)


model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
SAM(model.parameters()).grad_norm()
"""


def test_the_grad_norms_of_every_groups_parameters_stacked_on_one_gpu_are_reported():
    got = findings(SAM_NORM.replace("NORM", "p.grad.norm(p=2)"), "MP001")
    assert [f.line for f in got] == [12]
    assert "cuda:0" in got[0].message and "cuda:1" in got[0].message


def test_grad_norms_moved_to_one_gpu_before_the_stack_are_silent():
    assert findings(SAM_NORM.replace("NORM", 'p.grad.norm(p=2).to("cuda:0")'), "MP001") == []


def test_a_named_gpu_list_in_the_environment_is_a_placement():
    src = """
    import os
    import torch
    import torch.nn as nn


    def parse_devices(spec):
        out = {}
        for item in spec.split(","):
            name, gpu = item.split("=")
            out[name.strip()] = torch.device("cuda", int(gpu))
        return out


    DEV = parse_devices(os.environ.get("GAN_DEVICES", "G=1,D=0"))
    G, D = nn.Linear(4, 4).to(DEV["G"]), nn.Linear(4, 4).to(DEV["D"])
    y = D(G(torch.randn(2, 4, device=DEV["G"])) HOP)
    """
    assert lines(src.replace(" HOP", ""), "MP001") == [17]
    assert findings(src.replace(" HOP", '.to(DEV["D"])'), "MP001") == []
