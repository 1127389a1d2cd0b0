"""MP005 at run time for a round trip through a Python list (checks/host_list.py): a sampled token read with
`.tolist()` and made into a tensor on the embedding's GPU again, at every generation step, is reported at the
`torch.tensor` line; the token moved with `.to`, a list built anew and one setup-time round trip are not."""

SAMPLER = """
import torch
import torch.nn as nn

emb = nn.Embedding(50, 16).to("cuda:0")
head = nn.Linear(16, 50).to("cuda:1")
with torch.no_grad():
    ev = torch.zeros(4, 1, dtype=torch.long, device="cuda:0")
    for _ in range(STEPS):
        logits = head(emb(ev).mean(1).to("cuda:1"))
        nxt = torch.multinomial(logits.softmax(-1), 1)
        nxt = BACK  # <- back
        ev = torch.cat([ev, nxt], 1)
print(ev.shape)
"""


def _run(script, dryrun_cli, back, steps=6):
    s = script(SAMPLER.replace("BACK", back).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report["findings"]


def test_a_token_read_to_a_list_and_made_again_on_another_gpu_is_a_round_trip(script, dryrun_cli):
    s, findings = _run(script, dryrun_cli, 'torch.tensor(nxt.tolist(), device="cuda:0")')
    (f,) = findings
    assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP005", s.line("back"), "host_list")
    assert f["devices"] == ["cuda:1", "cpu", "cuda:0"] and "32 bytes" in f["message"]
    assert "t.to('cuda:0')" in f["suggestion"]
    s, findings = _run(script, dryrun_cli, 'torch.as_tensor(nxt.tolist(), device="cuda:0")')
    assert [(f["code"], f["line"]) for f in findings] == [("MP005", s.line("back"))]


def test_the_token_moved_a_new_list_or_one_trip_are_not_reported(script, dryrun_cli):
    assert _run(script, dryrun_cli, 'nxt.to("cuda:0")')[1] == []
    # A list changed on the host is data of the host's making: not the list the GPU gave.
    changed = 'torch.tensor([[min(t, 48) for t in row] for row in nxt.tolist()], device="cuda:0")'
    assert _run(script, dryrun_cli, changed)[1] == []
    assert _run(script, dryrun_cli, 'torch.tensor(nxt.tolist(), device="cuda:0")', steps=1)[1] == []
