"""Tiny Hugging Face checkpoints built here (nothing can be downloaded): a config with
random weights saved as safetensors, and a byte-level BPE tokenizer trained on a small
built-in corpus, with a chat template so the OpenAI chat endpoint works."""
import os

import torch

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A tensor is a multi-dimensional array of numbers.",
    "Serving language models means batching many requests together.",
    "Paged attention keeps the key value cache in fixed-size blocks.",
    "Hello world! How are you today? I am fine, thank you.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20.",
] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def save_tokenizer(path, vocab_size=512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def save_model(path, arch="llama", seed=0, **overrides):
    """Writes a tiny checkpoint of `arch` (llama, mistral, gemma2, qwen3, qwen3_moe) to
    `path`."""
    import transformers

    os.makedirs(path, exist_ok=True)
    tok = save_tokenizer(path)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  tie_word_embeddings=False, torch_dtype="float32")
    if arch == "llama":
        config = transformers.LlamaConfig(**{**common, **overrides})
        cls = transformers.LlamaForCausalLM
    elif arch == "mistral":  # sliding_window (None unless given) applies to every layer
        config = transformers.MistralConfig(**{**common, "sliding_window": None, **overrides})
        cls = transformers.MistralForCausalLM
    elif arch == "gemma2":  # layers alternate sliding and full attention; soft caps
        # vLLM's Gemma 2 always ties the output projection to the embedding.
        config = transformers.Gemma2Config(**{**common, "head_dim": 16,
                                              "tie_word_embeddings": True, **overrides})
        cls = transformers.Gemma2ForCausalLM
    elif arch == "qwen3":
        config = transformers.Qwen3Config(**{**common, "head_dim": 16, **overrides})
        cls = transformers.Qwen3ForCausalLM
    elif arch == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(**{**common, "head_dim": 16, "num_experts": 4,
                                                "num_experts_per_tok": 2,
                                                "moe_intermediate_size": 64, **overrides})
        cls = transformers.Qwen3MoeForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(config).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model, tok
