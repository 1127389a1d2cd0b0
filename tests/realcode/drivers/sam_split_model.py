"""Driver: davda54/sam's SAM optimizer on a model split over two GPUs (davda54/sam#5).

The optimizer is the project's sam.py at the case's commit (its cached path is
the first argument); the model is the two-stage shape of the PyTorch
model-parallel tutorial; the data is random. One SAM step: first_step,
a second forward/backward, second_step.

    python sam_split_model.py SAM_PY
"""

import sys

import torch
from torch import nn

from _common import TwoStages, load_file


def main() -> None:
    sam = load_file(sys.argv[1], "sam")
    model = TwoStages()
    optimizer = sam.SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
    inputs, targets = torch.randn(8, 10), torch.randn(8, 5)

    def loss() -> torch.Tensor:
        out = model(inputs)
        return nn.functional.mse_loss(out, targets.to(out.device))

    loss().backward()
    optimizer.first_step(zero_grad=True)
    loss().backward()
    optimizer.second_step(zero_grad=True)


if __name__ == "__main__":
    main()
