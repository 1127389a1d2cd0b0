"""Driver: ParlAI's transformer generator split with PipelineHelper (--model-parallel true), training and decoding.

The library is parlai 1.7.2 (installed into the folder passed first): the case's
file, parlai/utils/torch.py, holds PipelineHelper, which deals each ModuleList's
layers over the GPUs (`make_parallel`, as TorchGeneratorAgent does under
--model-parallel) and which the encoder and decoder use to pipeline
micro-batches (`split`, `schedule_work_items`, `chunk_to`, `join`). Stubbed: the
options (a small transformer), the dictionary (the vocabulary file: a small
vocabulary with ParlAI's special tokens) and the data (random token ids on
cuda:0, where the agent's batches go). One training step with the agent's loss
(teacher forcing), then greedy decoding with the decoder's incremental state,
as the agent's generation does, reordered by each step's choice.

    python parlai_pipeline.py SITE_DIR
"""

import sys

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
from parlai.agents.transformer.modules import TransformerGeneratorModel  # noqa: E402
from parlai.utils.torch import PipelineHelper  # noqa: E402

OPT = dict(
    embedding_size=32,
    ffn_size=64,
    n_layers=4,
    n_heads=2,
    n_positions=64,
    dropout=0.0,
    attention_dropout=0.0,
    relu_dropout=0.0,
    variant="aiayn",
    activation="relu",
    learn_positional_embeddings=False,
    embeddings_scale=True,
    n_segments=0,
    model_parallel=True,
)


class Vocabulary:
    """The few parts of parlai's DictionaryAgent the model reads: its size and the special tokens' ids."""

    null_token, start_token, end_token, unk_token = "__null__", "__start__", "__end__", "__unk__"
    size = 64

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, token: str) -> int:
        return [self.null_token, self.start_token, self.end_token, self.unk_token].index(token)


def main() -> None:
    torch.manual_seed(0)
    model = PipelineHelper().make_parallel(TransformerGeneratorModel(OPT, Vocabulary()))
    xs = torch.randint(4, Vocabulary.size, (8, 12), device="cuda:0")
    ys = torch.randint(4, Vocabulary.size, (8, 6), device="cuda:0")
    scores, _preds, encoder_states = model(xs, ys=ys)
    loss = torch.nn.functional.cross_entropy(scores.reshape(-1, scores.size(-1)), ys.view(-1), ignore_index=0)
    loss.backward()

    model.eval()
    with torch.no_grad():
        encoder_states = model.encoder(xs)
        tokens = torch.full((8, 1), model.START_IDX, dtype=torch.long, device="cuda:0")
        incr_state = None
        for _ in range(4):
            latent, incr_state = model.decoder(tokens, encoder_states, incr_state)
            best = model.output(latent[:, -1:, :]).argmax(dim=-1)
            order = torch.arange(8, device=best.device)
            incr_state = model.reorder_decoder_incremental_state(incr_state, order)
            tokens = torch.cat([tokens, best.to(tokens.device)], dim=1)


if __name__ == "__main__":
    main()
