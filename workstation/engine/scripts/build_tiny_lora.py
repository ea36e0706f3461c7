"""Build a small real LoRA adapter for the tiny model with ``peft`` (for the LoRA tests).

Runs inside the engine's Python (torch, transformers) with peft on ``sys.path``. Usage:
python build_tiny_lora.py BASE_MODEL_DIR OUT_DIR. Rank 8 on the attention projections, with
random (not zero) B matrices, so the adapter really changes what the model writes.
"""

import os
import shutil
import sys
from pathlib import Path

from model_manifest import write_manifest  # sibling script


def main():
    base, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    tmp = out_dir.with_name(out_dir.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    print("[1/2] loading the base model and wrapping it with peft", flush=True)
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        init_lora_weights=False, task_type="CAUSAL_LM")
    print("[2/2] saving the adapter", flush=True)
    get_peft_model(model, config).save_pretrained(tmp)
    (tmp / "README.md").unlink(missing_ok=True)
    write_manifest(tmp, out_dir.name, f"peft LoRA r=8 for {base.name}, random weights, built locally")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    print(f"done: {out_dir}", flush=True)


if __name__ == "__main__":
    main()
