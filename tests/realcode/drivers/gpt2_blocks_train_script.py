"""Driver: lomichael/parallelism's model-parallel training script, run as its own main() does.

The files are the project's training/model_parallel/train_model_parallel.py,
training/utils.py (its train_one_epoch, the case's file) and
parallelism/model_parallel.py at the case's commit, from the folder holding
them (bench/real_bugs.py passes the cached training/utils.py; its folder's
parent is the project's root). Stubbed: the network (`GPT2Config.from_pretrained`
returns a small config) and the data (the project's data.dataset.get_dataloader,
not in the case, gives two random batches of token ids and attention masks).
The GPT-2 blocks are transformers' own, from the folder passed first.

    python gpt2_blocks_train_script.py SITE_DIR TRAINING_UTILS_PY

Run with 4 GPUs or more: the script asserts it.
"""

import os
import sys
import tempfile
import types

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import transformers  # noqa: E402
from _common import GPT2_SMALL, load_file, offline_gpt2_config  # noqa: E402


def random_batches():
    ids = [torch.randint(0, GPT2_SMALL["vocab_size"], (2, 16)) for _ in range(2)]
    return [(i, torch.ones_like(i)) for i in ids]


def main() -> None:
    transformers.GPT2Config.from_pretrained = classmethod(offline_gpt2_config)
    dataset = types.ModuleType("data.dataset")
    dataset.get_dataloader = random_batches  # type: ignore[attr-defined]
    sys.modules["data"] = types.ModuleType("data")
    sys.modules["data.dataset"] = dataset
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[2])))
    os.chdir(tempfile.mkdtemp())  # the script logs to files in the working folder
    script = load_file(os.path.join(root, "training", "model_parallel", "train_model_parallel.py"), "train_mp")
    script.main()


if __name__ == "__main__":
    main()
