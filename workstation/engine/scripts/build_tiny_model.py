"""Build a tiny random-weight chat model from nothing (for fast tests).

Runs inside the engine's Python. Usage: python build_tiny_model.py OUT_DIR CHAT_TEMPLATE
A byte-level BPE tokenizer is trained locally (``tokenizers``) on text generated here,
with ChatML special tokens; the model is a 4-layer Qwen2 with random weights. It
serves through vLLM like any model but cannot follow instructions.
"""

import os
import random
import shutil
import sys
from pathlib import Path

from model_manifest import write_manifest  # sibling script

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]


def corpus(seed=1234):
    rng = random.Random(seed)
    words = (
        "def class return import from self if else elif for while in not and or None True False "
        "print file path read write list dict str int test assert repo git commit branch agent "
        "the a of to is that it with as on be at by this we you are was function value error"
    ).split()
    for _ in range(4000):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) + "\n"
    for i in range(256):
        yield f"{i} {chr(32 + i % 95)} {{}}[]()<>:;,.=+-*/\"'#_\n"


def main():
    out_dir, template_file = Path(sys.argv[1]), Path(sys.argv[2])
    tmp = out_dir.with_name(out_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print("[1/3] training a byte-level BPE tokenizer", flush=True)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None,
    )
    fast.chat_template = template_file.read_text()
    fast.save_pretrained(tmp)
    (tmp / "chat_template.jinja").write_text(template_file.read_text())
    print("[2/3] building a 4-layer Qwen2 with random weights", flush=True)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(fast), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        bos_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="bfloat16",
    )
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)
    print("[3/3] checksumming", flush=True)
    write_manifest(tmp, "tiny", "random weights, built locally")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    print(f"done: {out_dir}", flush=True)


if __name__ == "__main__":
    main()
