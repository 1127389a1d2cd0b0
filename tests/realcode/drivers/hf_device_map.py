"""Driver: real transformers model classes, each split over two GPUs with accelerate, one training step.

Stubs only the network and the data: each model is built from a small config
(random weights, no download), the batch is random; everything else is the
library's own code at the pinned version (bench/real_bugs.py installs it into
bench/.cache/realcode/site-<version>/ and passes that folder first).

    python hf_device_map.py SITE_DIR HEAD [HEAD ...]

A HEAD is a model class, optionally with the variant of its loss to take:
`RobertaForSequenceClassification:single` (see VARIANTS): the classification
heads pick their loss from the labels' shape and dtype and `num_labels`, so
each variant reaches one loss call. Each head is built, split and stepped
apart, in the order given.

The split is what users do with `from_pretrained(..., device_map="auto")`:
`infer_auto_device_map` with a memory cap that fills cuda:0 with about half the
model, then `dispatch_model`, whose hooks move each block's inputs. The inputs
and labels go to cuda:0, where the embeddings are, as in the reports.
"""

import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
import transformers  # noqa: E402
from _common import T5_SMALL  # noqa: E402
from accelerate import dispatch_model, infer_auto_device_map  # noqa: E402
from accelerate.utils import compute_module_sizes  # noqa: E402

BATCH, SEQ, VOCAB, CHOICES, IMAGE = 2, 16, 128, 3, 32
ENCODER_DECODER = dict(
    encoder_layers=2,
    decoder_layers=2,
    d_model=32,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    vocab_size=VOCAB,
    max_position_embeddings=64,
)
ENCODER = dict(
    num_hidden_layers=4,
    hidden_size=32,
    num_attention_heads=2,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=64,
)
VISION = dict(
    num_hidden_layers=4,
    hidden_size=32,
    num_attention_heads=2,
    intermediate_size=64,
    image_size=IMAGE,
    patch_size=8,
    num_channels=3,
)

# Small configs, by the model family's prefix: two to four blocks, untied heads
# (a tied head would pin the head to the embeddings' GPU and hide the split).
CONFIGS = {
    "GPT2": ("GPT2Config", dict(n_layer=4, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64)),
    "GPTNeoX": ("GPTNeoXConfig", dict(ENCODER)),
    "GPTNeoXJapanese": (
        "GPTNeoXJapaneseConfig",
        dict(
            num_hidden_layers=4,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_multiple_size=2,
            vocab_size=VOCAB,
            max_position_embeddings=64,
        ),
    ),
    "GPTNeo": (
        "GPTNeoConfig",
        dict(
            num_layers=4,
            hidden_size=32,
            num_heads=2,
            vocab_size=VOCAB,
            max_position_embeddings=64,
            attention_types=[[["global", "local"], 2]],
            window_size=16,
        ),
    ),
    "GPTJ": ("GPTJConfig", dict(n_layer=4, n_embd=32, n_head=2, rotary_dim=8, vocab_size=VOCAB, n_positions=64)),
    "Bloom": ("BloomConfig", dict(n_layer=4, hidden_size=32, n_head=2, vocab_size=VOCAB)),
    "T5": ("T5Config", dict(T5_SMALL)),
    "Bart": ("BartConfig", dict(ENCODER_DECODER)),
    "MBart": ("MBartConfig", dict(ENCODER_DECODER)),
    "Marian": ("MarianConfig", dict(ENCODER_DECODER, decoder_start_token_id=0)),
    "Pegasus": ("PegasusConfig", dict(ENCODER_DECODER)),
    "Roberta": ("RobertaConfig", dict(ENCODER)),
    "Longformer": ("LongformerConfig", dict(ENCODER, attention_window=8)),
    "Esm": ("EsmConfig", dict(ENCODER, vocab_size=33, mask_token_id=32)),
    "ViT": ("ViTConfig", dict(VISION)),
    "DeiT": ("DeiTConfig", dict(VISION)),
}
# Special tokens, the same for every family; the other ids are drawn above them (no sequence is padded).
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
PAD = SPECIAL["pad_token_id"]

# The loss variants of the classification heads: the config they need and their labels.
VARIANTS = {
    "regression1": dict(num_labels=1),  # MSE on squeezed logits
    "regression": dict(num_labels=2, problem_type="regression"),  # MSE on (batch, 2)
    "single": dict(num_labels=2),  # cross entropy on long labels
    "multi": dict(num_labels=2, problem_type="multi_label_classification"),  # BCE on float labels
    "masked": dict(num_labels=2),  # token classification with an attention mask
}


def family(class_name: str) -> str:
    """The longest CONFIGS prefix of the class name (GPTNeoXJapanese before GPTNeoX before GPTNeo)."""
    return max((p for p in CONFIGS if class_name.startswith(p)), key=len)


def build(class_name: str, variant: str) -> torch.nn.Module:
    config_name, kwargs = CONFIGS[family(class_name)]
    extra = VARIANTS.get(variant, {})
    config = getattr(transformers, config_name)(tie_word_embeddings=False, **SPECIAL, **kwargs, **extra)
    torch.manual_seed(0)
    return getattr(transformers, class_name)(config)


def split(model: torch.nn.Module) -> torch.nn.Module:
    total = compute_module_sizes(model)[""]
    cap = {0: int(total * 0.55), 1: int(total * 2)}
    # A class without `_no_split_modules` refuses `device_map="auto"`; its users call accelerate
    # themselves and name the blocks to keep whole, as later versions of the class do.
    no_split = model._no_split_modules
    if no_split is None:
        no_split = [f"{family(type(model).__name__)}{part}Layer" for part in ("Encoder", "Decoder")]
    device_map = infer_auto_device_map(model, max_memory=cap, no_split_module_classes=no_split)
    return dispatch_model(model, device_map=device_map)


def batch(class_name: str, variant: str, config) -> dict:
    """Random inputs and labels for the head, on cuda:0."""
    on0 = dict(device="cuda:0")
    vocab = getattr(config, "vocab_size", 0)  # vision models have none
    tokens = torch.randint(PAD + 4, vocab, (BATCH, SEQ), **on0) if vocab else None
    if tokens is not None and getattr(config, "eos_token_id", None) is not None:
        tokens[:, -1] = config.eos_token_id  # each sentence ends as a tokenizer ends it (BART-like heads pool there)
    if class_name.endswith("ForMultipleChoice"):
        choices = torch.randint(PAD + 4, vocab, (BATCH, CHOICES, SEQ), **on0)
        out = dict(input_ids=choices, labels=torch.randint(0, CHOICES, (BATCH,), **on0))
        if class_name.startswith("Longformer"):
            # Else it looks for a question's separator tokens in each choice: global attention on the first token.
            out["global_attention_mask"] = torch.zeros_like(choices)
            out["global_attention_mask"][..., 0] = 1
        return out
    if class_name.endswith("ForTokenClassification"):
        out = dict(input_ids=tokens, labels=torch.randint(0, 2, (BATCH, SEQ), **on0))
        if variant == "masked":
            out["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long, **on0)
        return out
    if class_name.endswith(("ForSequenceClassification", "ForImageClassification")):
        n = VARIANTS[variant]["num_labels"]
        labels = torch.randint(0, n, (BATCH,), **on0) if variant == "single" else torch.rand(BATCH, n, **on0)
        if variant == "regression1":
            labels = labels.view(BATCH)
        if class_name.endswith("ForImageClassification"):
            return dict(pixel_values=torch.randn(BATCH, 3, IMAGE, IMAGE, **on0), labels=labels)
        return dict(input_ids=tokens, labels=labels)
    # Language-model heads: the labels are token ids.
    return dict(input_ids=tokens, labels=torch.randint(PAD + 4, vocab, (BATCH, SEQ), **on0))


def step(head: str) -> None:
    class_name, _, variant = head.partition(":")
    model = split(build(class_name, variant))
    out = model(**batch(class_name, variant, model.config))
    out.loss.backward()


def main() -> None:
    for head in sys.argv[2:]:
        step(head)


if __name__ == "__main__":
    main()
