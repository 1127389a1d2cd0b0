"""Driver: torchinfo.summary() on a model split over two GPUs (TylerYep/torchinfo#224).

The reporter's model "would not look different from the official PyTorch model
parallelism toy example", so the model here is that shape: two linear stages
on cuda:0 and cuda:1 with the hop in forward. It trains fine; summary() is
the library's own code at the pinned version (bench/real_bugs.py installs it
into the folder passed as the first argument). The data is random.

    python torchinfo_summary.py SITE_DIR
"""

import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
from _common import TwoStages  # noqa: E402
from torchinfo import summary  # noqa: E402


def main() -> None:
    model = TwoStages()
    batch = torch.randn(20, 10, device="cuda:0")
    model(batch).sum().backward()  # training works
    summary(model, input_data=[batch], verbose=0)


if __name__ == "__main__":
    main()
