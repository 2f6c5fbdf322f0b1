"""What TorchTitan's debug configs read from its source tree, made here (its wheel ships
neither, and nothing can be downloaded): a Hugging Face tokenizer directory for
`--model.hf_assets_path` (a byte-level BPE trained on the minGPT example's corpus) and a
text dataset directory in the layout of TorchTitan's `c4_test` (JSON lines with a "text"
field) for `--training.dataset c4_test --training.dataset_path` (docs/torchtitan.md).

    python examples/torchtitan/make_assets.py /tmp/titan_assets
"""
import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from examples.mingpt.data import CORPUS  # noqa: E402
from examples.mingpt.make_corpus import corpus  # noqa: E402


def corpus_text():
    if os.path.exists(CORPUS):
        with open(CORPUS) as f:
            return f.read()
    return corpus(12000, 7)


def make_tokenizer(path, lines, vocab_size=2000):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                            eos_token="<|end_of_text|>").save_pretrained(path)


def make_dataset(path, lines, per_doc=8):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "data.json"), "w") as f:
        for i in range(0, len(lines), per_doc):
            f.write(json.dumps({"text": " ".join(lines[i:i + per_doc])}) + "\n")


def main(out):
    lines = [ln.strip() for ln in corpus_text().splitlines() if ln.strip()]
    make_tokenizer(os.path.join(out, "tokenizer"), lines)
    make_dataset(os.path.join(out, "c4_test"), lines)
    print(f"tokenizer: {out}/tokenizer  dataset: {out}/c4_test ({len(lines)} lines)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/titan_assets")
