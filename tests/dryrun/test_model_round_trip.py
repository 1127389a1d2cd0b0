"""MP005 for a whole model's weights moved to the host and back to the same GPUs, unused on the host and with
nothing else made on the GPUs meanwhile (runtime/checks/model_round_trip.py): a checkpoint made portable by
moving the model instead of copying its state dict. An offload whose GPU memory served other work, a model
run on the host, or one left there, is silent."""

PROGRAM = """
import torch
import torch.nn as nn


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(256, 256)
        self.b = nn.Linear(256, 256)
        self.place()

    def place(self):
        self.a.to("cuda:0")
        self.b.to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


model = Split()
other = nn.Linear(256, 256).to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    model(torch.randn(8, 256)).sum().backward()
    opt.step()
    opt.zero_grad()
    if step % 2 == 1:
        OFF
        state = model.state_dict()
        BETWEEN
        BACK
print("done")
"""


def _run(script, dryrun_cli, off="model.cpu()  # <- off", between="pass", back="model.place()"):
    s = script(PROGRAM.replace("OFF", off).replace("BETWEEN", between).replace("BACK", back))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    return s, report


def test_a_model_sent_to_the_host_for_its_state_dict_and_placed_back_is_mp005_at_the_move(script, dryrun_cli):
    for off in ("model.cpu()  # <- off", 'model.to("cpu")  # <- off'):
        s, report = _run(script, dryrun_cli, off=off)
        assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP005", s.line("off"))]
        (f,) = report["findings"]
        assert f["devices"] == ["cuda:0", "cuda:1", "cpu"] and f["extra"]["scope"] == "model"
        assert "state_dict().items()" in f["suggestion"]


def test_an_offload_whose_memory_served_other_work_a_model_run_on_the_host_or_left_there_is_silent(script, dryrun_cli):
    for between, back in (
        ("other(torch.randn(4096, 256, device='cuda:0')).sum()", "model.place()"),  # memory used meanwhile
        ("model.a(torch.randn(8, 256)).sum().backward()", "model.place()"),  # run on the host
        ("pass", "break"),  # left on the host
    ):
        s, report = _run(script, dryrun_cli, between=between, back=back)
        assert report["findings"] == [], between


def test_a_few_bytes_back_to_the_host_are_no_round_trip_and_a_batch_is(script, dryrun_cli):
    # A batch mover moves the lengths too; pack_padded_sequence wants them back on the host: 64 bytes, silent.
    s = script(
        """
        import torch

        for _ in range(2):
            batch = {k: v.to("cuda:0") for k, v in {"x": torch.randn(256, 256), "n": torch.arange(8)}.items()}
            lengths = batch["n"].cpu()
            back = batch["x"].cpu()  # <- trip
        print(lengths.sum(), back.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("MP005", s.line("trip"))]
