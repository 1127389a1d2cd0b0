"""Driver: a project's copy of the tutorial's ToyModel script (alanwang5210/llm's model_parallel.py), run as written.

The file (its cached path is the only argument) is a script: ToyModel on
cuda:0 and cuda:1, then one SGD step at module level. Its line 20 spells
`model.paraeters()`, which stops it on any machine before the step; the driver
runs the script's lines as written around it and that one line spelled right.
Nothing is stubbed: the data is the script's own random batch.

    python toy_script.py MODEL_PARALLEL_PY
"""

import sys

from _common import load_definitions, run_lines
from torch import optim

MISSPELT = 20  # optimizer = optim.SGD(model.paraeters(), lr=0.001)


def main() -> None:
    script = load_definitions(sys.argv[1], "model_parallel", run=(1, MISSPELT - 1))
    script.optimizer = optim.SGD(script.model.parameters(), lr=0.001)
    run_lines(script, MISSPELT + 1, 10**6)


if __name__ == "__main__":
    main()
