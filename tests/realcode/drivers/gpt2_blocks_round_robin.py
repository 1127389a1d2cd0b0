"""Driver: lomichael/parallelism's ModelParallel (GPT-2 blocks dealt over GPUs by hand), one training step.

The file is the project's own parallelism/model_parallel.py at the commit the
case names (bench/real_bugs.py passes its cached path). Stubbed: the network
(`GPT2Config.from_pretrained` returns a small config instead of downloading
gpt2's) and the data (random token ids). The blocks are transformers' own
GPT2Block, from the folder passed first.

    python gpt2_blocks_round_robin.py SITE_DIR MODEL_PARALLEL_PY

Run with 4 GPUs or more: the class asserts it.
"""

import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import transformers  # noqa: E402
from _common import GPT2_SMALL, load_file, offline_gpt2_config  # noqa: E402


def main() -> None:
    transformers.GPT2Config.from_pretrained = classmethod(offline_gpt2_config)
    path = os.path.abspath(sys.argv[2])
    os.chdir(tempfile.mkdtemp())  # later versions log to ./model_parallel.log
    model = load_file(path, "model_parallel").ModelParallel("gpt2")
    ids = torch.randint(0, GPT2_SMALL["vocab_size"], (2, 16))
    logits = model(ids)
    labels = ids.to(logits.device)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
    loss.backward()


if __name__ == "__main__":
    main()
