"""Correct programs of precision round 23 (session 37), cut to what the dry run said of them: two towers on two
GPUs that exchange node-sized aggregates at every propagation step (a bipartite graph model, users on cuda:0 and
items on cuda:1) cross back and forth with no layer (module) run between the crossings: no per-layer ping-pong
(MP006), which stays reported when layers do run between them."""

TOWERS = """
import torch
import torch.nn as nn

U, I = torch.device("cuda:0"), torch.device("cuda:1")
user = nn.Parameter(torch.randn(30, 16, device=U) * 0.1)
item = nn.Parameter(torch.randn(50, 16, device=I) * 0.1)
us, its = torch.randint(0, 30, (300,)), torch.randint(0, 50, (300,))
edges = {dev: (us.to(dev), its.to(dev)) for dev in (U, I)}


def propagate():
    u, i = user, item
    for _ in range(3):
        a, b = edges[I]
        new_u = torch.zeros(30, 16, device=I).index_add_(0, a, i[b]).to(U)
        a, b = edges[U]
        new_i = torch.zeros(50, 16, device=U).index_add_(0, b, u[a]).to(I)
        u, i = new_u, new_i
    return u, i


for step in range(2):
    u, i = propagate()
    (u.sum() + i.sum().to(U)).backward()
"""

LAYERS = """
import torch
import torch.nn as nn

layers = nn.ModuleList(nn.Linear(16, 16).to(f"cuda:{k % 2}") for k in range(6))
for step in range(2):
    x = torch.randn(4, 16)
    for k, layer in enumerate(layers):
        x = layer(x.to(f"cuda:{k % 2}"))  # <- hop
    x.sum().backward()
"""


def test_two_towers_exchanging_aggregates_with_no_layer_between_are_no_ping_pong(script, dryrun_cli):
    status, report, err = dryrun_cli(script(TOWERS), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_layers_dealt_round_robin_are_still_ping_pong(script, dryrun_cli):
    s = script(LAYERS)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP006", s.line("hop"))], err
