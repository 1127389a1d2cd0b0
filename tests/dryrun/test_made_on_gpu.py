"""MP020 at run time for numbers made on a GPU only to be read on the host (checks/made_on_gpu.py): negatives drawn
on the entity table's GPU and read back with `.tolist()` to be filtered on the host, at every step, are reported at
the read; drawn on the host they are clean, and so are numbers the GPU uses first and a read made once."""

NEGATIVES = """
import torch

known = {(0, 0, 3), (1, 0, 5)}
table = torch.nn.Embedding(100, 16).to("cuda:0")
for step in range(STEPS):
    positives = torch.randint(0, 100, (32, 3))
    cand = torch.randint(0, 100, (32, 8)DEVICE)
    rows = READ  # <- read
    for row, (h, r, _) in zip(rows, positives.tolist()):
        for j, t in enumerate(row):
            while (h, r, t) in known or t % 7 == 0:  # a known triple (and every 7th id, for the test)
                t = (t + 1) % 100
            row[j] = t
    table(torch.tensor(rows, device="cuda:0")).sum().backward()
print("done")
"""


def _run(script, dryrun_cli, device=', device="cuda:0"', read="cand.tolist()", steps=3):
    s = script(NEGATIVES.replace("DEVICE", device).replace("READ", read).replace("STEPS", str(steps)))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report["findings"]


def test_negatives_drawn_on_the_gpu_and_read_back_to_be_filtered_are_mp020_at_the_read(script, dryrun_cli):
    for read in ("cand.tolist()", "cand.cpu().tolist()"):
        s, findings = _run(script, dryrun_cli, read=read)
        (f,) = findings  # (the list changed on the host and made into a tensor again is no round trip)
        assert (f["code"], f["line"], f["extra"]["scope"]) == ("MP020", s.line("read"), "gpu_made"), read
        assert f["devices"] == ["cuda:0", "cpu"] and "`torch.randint(...)`" in f["suggestion"]


def test_drawn_on_the_host_used_on_the_gpu_first_or_read_once_is_clean(script, dryrun_cli):
    assert _run(script, dryrun_cli, device="")[1] == []
    assert _run(script, dryrun_cli, read="(cand % 50).tolist()")[1] == []
    assert _run(script, dryrun_cli, steps=1)[1] == []
