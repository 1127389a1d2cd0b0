"""Driver: a transformers model split with its own `parallelize()`, one training step and a beam search.

Before accelerate, transformers split T5 and GPT-2 by hand: `model.parallelize()`
deals the blocks over every GPU (utils/model_parallel_utils.get_device_map) and
each block's forward moves its inputs. The driver builds the model from a small
config (random weights, no download: the network is stubbed), calls
`parallelize()` with its default device map, runs a training step on a random
batch whose ids and labels are on cuda:0, as the docs show, and `generate()`
with beam search, whose cache reordering runs on every GPU. Everything else is
the library's own code at the pinned version, from the folder passed first.

    python hf_parallelize.py SITE_DIR MODEL_CLASS
"""

import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import transformers  # noqa: E402
from _common import T5_SMALL  # noqa: E402

VOCAB = 128
# Small configs with one block per GPU for up to four GPUs (the device map deals blocks, not layers within).
CONFIGS = {
    "T5ForConditionalGeneration": (
        "T5Config",
        dict(T5_SMALL, num_layers=4, num_decoder_layers=4, pad_token_id=0, eos_token_id=1),
    ),
    "GPT2LMHeadModel": (
        "GPT2Config",
        dict(n_layer=4, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64, bos_token_id=1, eos_token_id=1),
    ),
}


def main() -> None:
    class_name = sys.argv[2]
    config_name, kwargs = CONFIGS[class_name]
    torch.manual_seed(0)
    model = getattr(transformers, class_name)(getattr(transformers, config_name)(**kwargs))
    model.parallelize()
    ids = torch.randint(2, VOCAB, (2, 8), device="cuda:0")
    labels = torch.randint(2, VOCAB, (2, 8), device="cuda:0")
    model(input_ids=ids, labels=labels).loss.backward()
    model.eval()
    with torch.no_grad():
        model.generate(ids, num_beams=2, max_length=12, min_length=12, do_sample=False)


if __name__ == "__main__":
    main()
