"""Driver: a real transformers model class, split over two GPUs with accelerate, one training step.

Stubs only the network and the data: the model is built from a small config
(random weights, no download), the batch is random token ids; everything else
is the library's own code at the pinned version (bench/real_bugs.py installs it
into bench/.cache/realcode/site-<version>/ and passes that folder first).

    python hf_device_map.py SITE_DIR MODEL_CLASS

The split is what users do with `from_pretrained(..., device_map="auto")`:
`infer_auto_device_map` with a memory cap that fills cuda:0 with about half the
model, then `dispatch_model`, whose hooks move each block's inputs. The inputs
and labels go to cuda:0, where the embeddings are, as in the reports.
"""

import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import transformers  # noqa: E402
from accelerate import dispatch_model, infer_auto_device_map  # noqa: E402
from accelerate.utils import compute_module_sizes  # noqa: E402

# Small configs: two to four blocks, untied heads (a tied head would pin the
# head to the embeddings' GPU and hide the split).
CONFIGS = {
    "GPT2LMHeadModel": ("GPT2Config", dict(n_layer=4, n_embd=32, n_head=2, vocab_size=128, n_positions=64)),
    "GPTNeoForCausalLM": (
        "GPTNeoConfig",
        dict(
            num_layers=4,
            hidden_size=32,
            num_heads=2,
            vocab_size=128,
            max_position_embeddings=64,
            attention_types=[[["global", "local"], 2]],
            window_size=16,
        ),
    ),
    "GPTNeoXForCausalLM": (
        "GPTNeoXConfig",
        dict(
            num_hidden_layers=4,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            vocab_size=128,
            max_position_embeddings=64,
        ),
    ),
    "BloomForCausalLM": ("BloomConfig", dict(n_layer=4, hidden_size=32, n_head=2, vocab_size=128)),
    "T5ForConditionalGeneration": (
        "T5Config",
        dict(
            num_layers=2,
            num_decoder_layers=2,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_heads=2,
            vocab_size=128,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
    ),
    "BartForConditionalGeneration": (
        "BartConfig",
        dict(
            encoder_layers=2,
            decoder_layers=2,
            d_model=32,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            vocab_size=128,
            max_position_embeddings=64,
        ),
    ),
}


def build(class_name: str) -> torch.nn.Module:
    config_name, kwargs = CONFIGS[class_name]
    config = getattr(transformers, config_name)(tie_word_embeddings=False, **kwargs)
    torch.manual_seed(0)
    return getattr(transformers, class_name)(config)


def split(model: torch.nn.Module) -> torch.nn.Module:
    total = compute_module_sizes(model)[""]
    cap = {0: int(total * 0.55), 1: int(total * 2)}
    device_map = infer_auto_device_map(model, max_memory=cap, no_split_module_classes=model._no_split_modules)
    return dispatch_model(model, device_map=device_map)


def main() -> None:
    model = split(build(sys.argv[2]))
    ids = torch.randint(0, 128, (2, 16), device="cuda:0")
    labels = torch.randint(0, 128, (2, 16), device="cuda:0")
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()


if __name__ == "__main__":
    main()
