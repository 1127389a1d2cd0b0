"""MP021 on virtual GPUs: small tensors moved one by one at one line and then stacked where they arrived
(runtime/checks/per_item_moves.py): a Dataset moving each sample, gathered by the DataLoader's collate, and a
comprehension of moves stacked. Silent for a few items, for large ones, for moves from several lines or
devices, and for items worked on after their move."""


def _codes(report):
    return [(f["code"], f["line"]) for f in report["findings"]]


def test_a_dataset_moving_each_sample_to_the_gpu_is_mp021_at_its_move(script, dryrun_cli):
    s = script(
        """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Clips(Dataset):
            def __init__(self):
                self.x = torch.randn(64, 4000)

            def __len__(self):
                return len(self.x)

            def __getitem__(self, i):
                return self.x[i].to("cuda:0")  # <- move

        net = torch.nn.Linear(4000, 8).to("cuda:0")
        for batch in DataLoader(Clips(), batch_size=16):
            net(batch).sum().backward()
        print("done")
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["move"])]
    (f,) = report["findings"]
    assert f["devices"] == ["cpu", "cuda:0"] and f["severity"] == "warning"
    assert f["extra"]["items"] == 16 and f["extra"]["count"] == 4  # one finding, seen once per batch
    assert "16 tensors" in f["message"] and "torch.stack(items).to('cuda:0')" in f["suggestion"]


def test_a_stack_of_moves_between_gpus_is_reported_and_the_stack_moved_once_is_not(script, dryrun_cli):
    s = script(
        """
        import torch

        parts = [torch.randn(32, 32, device="cuda:0") for _ in range(12)]
        bad = torch.stack([p.to("cuda:1") for p in parts])  # <- bad
        good = torch.stack(parts).to("cuda:1")
        print(bad.shape, good.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["bad"])]
    assert report["findings"][0]["devices"] == ["cuda:0", "cuda:1"]


def test_few_large_mixed_or_worked_on_items_are_not_reported(script, dryrun_cli):
    s = script(
        """
        import torch

        small = [torch.randn(256) for _ in range(16)]
        few = torch.stack([x.to("cuda:0") for x in small[:7]])  # 7 copies: a few launches
        large = [torch.randn(64, 1024) for _ in range(8)]  # 256 KiB each: one copy per item costs no more
        big = torch.cat([x.to("cuda:0") for x in large])
        halves = [x.to("cuda:0") for x in small[:8]]
        halves += [x.cuda(0) for x in small[8:]]
        two_lines = torch.stack(halves)  # moved at two lines
        mixed = [torch.randn(256, device="cuda:1") for _ in range(8)] + small[:8]
        from_two = torch.stack([x.to("cuda:0") for x in mixed])  # from two devices: no one source
        worked = torch.stack([x.to("cuda:0") * 2 for x in small])  # each worked on where it arrived
        on_gpu = [torch.randn(256, device="cuda:0") for _ in range(8)]
        there = torch.stack([x.to("cuda:0") for x in on_gpu])  # already there: no copy
        print(few.shape, big.shape, two_lines.shape, from_two.shape, worked.shape, there.shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


SLICES = """
import torch
import torch.nn as nn

cell = nn.GRUCell(32, 64).to("cuda:1")
enc = nn.Linear(16, 32).to("cuda:0")
h = torch.zeros(8, 64, device="cuda:1")
for step in range(2):
    feats = enc(torch.randn(8, 50, 16, device="cuda:0"))
    for t in range(feats.shape[1]):
        h = cell(feats[:, t].to("cuda:1"), h)  # <- move
    h = h.detach()
print("done")
"""


def test_the_time_steps_of_one_tensor_moved_one_by_one_are_mp021_at_the_move(script, dryrun_cli):
    s = script(SLICES)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["move"])]
    (f,) = report["findings"]
    assert f["devices"] == ["cuda:0", "cuda:1"] and f["extra"]["slices"] is True
    assert "slices of one tensor" in f["message"] and "once, before the loop" in f["suggestion"]


def test_a_corpus_encoded_chunk_by_chunk_is_not_reported(script, dryrun_cli):
    # Ranges of rows (`x[i : i + batch]`) are in one piece: mini-batches, chunked on purpose; the same loop over
    # columns (`x[:, i]`, strided) picks time steps, and one over rows (`x[i]`, a dimension less) picks items.
    chunks = """
import torch
import torch.nn as nn

enc = nn.Linear(16, 8).to("cuda:0")
passages = torch.randn(4096, 16)
index = torch.cat([enc(passages[i : i + 256].to("cuda:0")) for i in range(0, len(passages), 256)])
print("done")
"""
    status, report, err = dryrun_cli(script(chunks), "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
    rows = (
        chunks.replace('passages[i : i + 256].to("cuda:0")', 'passages[:, i].to("cuda:0")[:, None]')
        .replace("range(0, len(passages), 256)", "range(16)")
        .replace("nn.Linear(16, 8)", "nn.Linear(1, 8)")
    )
    status, report, err = dryrun_cli(script(rows), "--gpus", "2")
    assert status == 0, err
    assert [f["code"] for f in report["findings"]] == ["MP021"]
    single = chunks.replace('passages[i : i + 256].to("cuda:0")', 'passages[i].to("cuda:0")[None]').replace(
        "range(0, len(passages), 256)", "range(16)"
    )
    status, report, err = dryrun_cli(script(single), "--gpus", "2")
    assert status == 0, err
    assert [f["code"] for f in report["findings"]] == ["MP021"]


def test_slices_moved_once_interleaved_with_a_pipeline_or_of_changing_data_are_not_reported(script, dryrun_cli):
    s = script(
        SLICES.replace('feats[:, t].to("cuda:1")', "moved[:, t]").replace(
            "    for t in range", '    moved = feats.to("cuda:1")\n    for t in range'
        )
        + """
s0 = nn.Linear(16, 16).to("cuda:0")
s1 = nn.Linear(16, 4).to("cuda:1")
batch = torch.randn(64, 16)
outs = [s1(s0(mb.to("cuda:0")).to("cuda:1")) for mb in batch.chunk(16)]
buf = torch.zeros(8, 20, 32, device="cuda:0")
for t in range(1, 20):
    buf[:, t] = buf[:, t - 1] + 1
    h = cell(buf[:, t].to("cuda:1"), h)
"""
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []


SAMPLER = """
import torch
import torch.nn as nn

rnn = nn.GRUCell(8, 64).to("cuda:0")
head = nn.Linear(64, 8).to("cuda:1")
with torch.no_grad():
    h = torch.zeros(16, 64, device="cuda:0")
    y = torch.zeros(16, 8, device="cuda:0")
    paths = []
    for t in range(12):
        h = rnn(y, h)
        y = torch.normal(head(h.to("cuda:1")), 1.0)
        paths.append(y.cpu())  # <- copy
        y = y.to("cuda:0")
    print(torch.stack(paths, dim=1).shape)
"""


def test_a_sampling_loop_copying_each_step_to_the_host_is_mp021_though_other_hops_come_between(script, dryrun_cli):
    # Each `.cpu()` makes the host wait for the GPU: the hops between them overlap nothing, and the loop brings
    # no new data from the host, so keeping the samples on the GPU and copying the stack once does the same.
    s = script(SAMPLER)
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["copy"])]
    (f,) = report["findings"]
    assert f["devices"] == ["cuda:1", "cpu"] and f["extra"]["items"] == 12
    assert "a wait of the host" in f["message"] and "torch.stack(items).cpu()" in f["suggestion"]
    # Asked not to block, the copies may overlap the next steps' work: as for a pipeline's hops, not reported.
    status, report, err = dryrun_cli(
        script(SAMPLER.replace("y.cpu()", "y.to('cpu', non_blocking=True)")), "--gpus", "2"
    )
    assert (status, report["findings"]) == (0, []), err


def test_an_evaluation_loop_copying_each_batchs_predictions_to_the_host_is_not_reported(script, dryrun_cli):
    # New data comes from the host between the copies: the per-batch copy bounds what the GPU holds (a common
    # and fair choice), no sampler's steps on data already there.
    s = script(
        """
        import torch
        import torch.nn as nn

        net = nn.Linear(32, 4).to("cuda:1")
        data = torch.randn(12, 16, 32)
        preds = []
        with torch.no_grad():
            for x in data:
                preds.append(net(x.to("cuda:1")).argmax(-1).cpu())
        print(torch.cat(preds).shape)
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err


def test_graphs_moved_one_by_one_and_padded_together_are_mp021(script, dryrun_cli):
    # `pad_sequence` gathers like `torch.stack`: each graph's node states crossed on their own.
    s = script(
        """
        import torch
        import torch.nn as nn

        mp = nn.Linear(16, 16).to("cuda:0")
        readout = nn.GRU(16, 16, batch_first=True).to("cuda:1")
        sizes = [12, 20, 16, 24, 14, 18, 22, 13, 17, 15]
        for step in range(2):
            h = mp(torch.randn(sum(sizes), 16, device="cuda:0"))
            parts = [part.to("cuda:1") for part in h.split(sizes)]  # <- move
            readout(nn.utils.rnn.pad_sequence(parts, batch_first=True))[0].sum().backward()
        print("done")
        """
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["move"])]
    (f,) = report["findings"]
    assert "nn.utils.rnn.pad_sequence" in f["message"] and f["extra"]["items"] == len([12] * 10)


PREFILL = """
import torch
import torch.nn as nn


class Stages(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16).to("cuda:0")
        self.cell = nn.GRUCell(16, 16).to("cuda:1")

    def forward(self, tokens, h):
        return self.cell(self.embed(tokens.to("cuda:0")).to("cuda:1"), h)  # <- move


model = Stages()
prompt = torch.randint(0, 50, (4, 24))
with torch.no_grad():
    h = torch.zeros(4, 16, device="cuda:1")
    for t in range(prompt.shape[1]):
        h = model(PROMPT[:, t], h)
print(h.shape)
"""


def test_a_host_prompt_fed_one_position_per_call_is_mp021_though_each_call_crosses_the_stages(script, dryrun_cli):
    # Time steps of a tensor on the host: the whole could be uploaded once, whatever the stages do between; the
    # model's calls after its first run unchecked (the signature cache), and each copy is still seen.
    s = script(PREFILL.replace("PROMPT", "prompt"))
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert status == 0, err
    assert _codes(report) == [("MP021", s.marks["move"])]
    assert report["findings"][0]["devices"] == ["cpu", "cuda:0"] and report["findings"][0]["extra"]["slices"]
    s = script(
        PREFILL.replace("PROMPT", "prompt_d").replace(
            "with torch.no_grad():", 'prompt_d = prompt.to("cuda:0")\nwith torch.no_grad():'
        )
    )
    status, report, err = dryrun_cli(s, "--gpus", "2")
    assert (status, report["findings"]) == (0, []), err
