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
