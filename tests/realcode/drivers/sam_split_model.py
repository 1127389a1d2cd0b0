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

from _load import load_file


class TwoStages(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10).to("cuda:0")
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5).to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.net1(x.to("cuda:0")))
        return self.net2(x.to("cuda:1"))


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
