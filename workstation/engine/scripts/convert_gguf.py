"""Convert a GGUF checkpoint to an ordinary Hugging Face directory vLLM can serve.

Runs inside the engine's Python (it has torch and transformers); the app never
imports this. Usage: python convert_gguf.py GGUF_FILE OUT_DIR CHAT_TEMPLATE NAME
Writes into OUT_DIR atomically (a temporary sibling renamed at the end) and
finishes with a manifest that lists every file's size and SHA-256.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import byte_level  # sibling scripts
from model_manifest import write_manifest


def say(step, total, text):
    print(f"[{step}/{total}] {text}", flush=True)


def main():
    gguf_file, out_dir, template_file, name = sys.argv[1:5]
    gguf_path = Path(gguf_file)
    out_dir = Path(out_dir)
    tmp_dir = out_dir.with_name(out_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    total = 5
    say(1, total, "loading libraries (torch, transformers)")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    say(2, total, f"reading {gguf_path.name}")
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if byte_level.mend(tokenizer):
        print("tokenizer: byte-level vocabulary, decoder set to plain ByteLevel (grammar backends read it)",
              flush=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.bfloat16
    )
    say(3, total, "rebuilding a dense model from the config")
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    config.torch_dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing={missing[:5]} unexpected={unexpected[:5]}")
    if getattr(config, "tie_word_embeddings", False):
        fresh.tie_weights()
    say(4, total, f"writing safetensors to {out_dir}")
    tmp_dir.mkdir(parents=True)
    fresh.save_pretrained(tmp_dir, safe_serialization=True)
    tokenizer.chat_template = Path(template_file).read_text()
    tokenizer.save_pretrained(tmp_dir)
    (tmp_dir / "chat_template.jinja").write_text(Path(template_file).read_text())
    gen = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>")}
    (tmp_dir / "generation_config.json").write_text(json.dumps(gen, indent=2))
    say(5, total, "checksumming")
    write_manifest(tmp_dir, name, gguf_path.name)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp_dir, out_dir)
    print(f"done: {out_dir}", flush=True)


if __name__ == "__main__":
    main()
