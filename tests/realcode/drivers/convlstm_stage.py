"""Driver: ndrplz/ConvLSTM_pytorch's ConvLSTM as the second stage of a model split over two GPUs.

The ConvLSTM is the project's convlstm.py at the case's commit (its cached path
is the first argument). Stage 1, a convolution on cuda:0, feeds a ConvLSTM
placed on cuda:1, with the hop in forward; the hidden state is left to the
module (hidden_state=None), as the README shows. The data is random.

    python convlstm_stage.py CONVLSTM_PY
"""

import inspect
import sys

import torch
from torch import nn

from _common import load_file


class Video(nn.Module):
    def __init__(self, convlstm: type) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1).to("cuda:0")
        # Older versions take the frame size up front, newer ones read it in forward.
        size = {"input_size": (8, 8)} if "input_size" in inspect.signature(convlstm).parameters else {}
        self.rnn = convlstm(input_dim=4, hidden_dim=[4], kernel_size=(3, 3), num_layers=1, batch_first=True, **size)
        self.rnn.to("cuda:1")

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        b, t = clip.shape[:2]
        x = self.stem(clip.flatten(0, 1).to("cuda:0")).unflatten(0, (b, t))
        layers, _ = self.rnn(x.to("cuda:1"))
        return layers[-1]


def main() -> None:
    model = Video(load_file(sys.argv[1], "convlstm").ConvLSTM)
    out = model(torch.randn(2, 3, 3, 8, 8))
    out.mean().backward()


if __name__ == "__main__":
    main()
