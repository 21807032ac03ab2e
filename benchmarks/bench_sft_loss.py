"""One warm-start training step with transformers' full causal-LM loss against rmjudge's loss
from the target positions' logits (`training.completion_loss`), in the same run, on the same
model and batch.

    python benchmarks/bench_sft_loss.py [--prompt 400] [--target 60] [--batch 4] [--repeat 3]

Model: the embedded model as a transformers folder (float32, the GGUF converted once and
cached), a LoRA of rank 8 on every linear layer as `rmjudge-train sft` makes it, one thread.
Each row is `--prompt` tokens (labels -100) and `--target` tokens to learn, the lengths of a
judge prompt and an analysis with its verdict. Prints the CPU seconds of a forward and backward
pass for each loss (best of `--repeat`) and the two losses. Nothing is asserted: docs/training.md
records the figures with this command.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=400)
    ap.add_argument("--target", type=int, default=60)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import torch
    from peft import get_peft_model
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    from rmjudge.engine.models import default_model_path
    from training.completion_loss import completion_loss
    from training.hf import DEFAULT_TARGETS, ModelSource, materialize
    from training.sft import pad_collator

    torch.set_num_threads(1)
    folder = materialize(ModelSource.parse(default_model_path()))
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=DEFAULT_TARGETS.split(",")))
    model.train()
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(args.batch):
        p = args.prompt - 10 * i  # rows of different lengths, padded as in training
        ids = torch.randint(10, 49000, (p + args.target,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * p + ids[p:]})
    batch = pad_collator(0)(rows)

    def full():
        loss = model(**batch).loss
        loss.backward()
        return float(loss)

    def targets_only():
        loss = completion_loss(model, batch)
        loss.backward()
        return float(loss)

    results = {}
    for name, fn in (("full logits", full), ("target logits", targets_only)):
        best, value = float("inf"), None
        for _ in range(args.repeat):
            model.zero_grad()
            t = time.process_time()
            value = fn()
            best = min(best, time.process_time() - t)
        results[name] = (best, value)
        print(f"{name:14s} {best:7.2f} s CPU per step (forward + backward), loss {value:.6f}")
    (a, _), (b, _) = results.values()
    print(f"speed-up {a / b:.2f}x; batch {args.batch} x ({args.prompt} prompt + {args.target} "
          "target tokens)")


if __name__ == "__main__":
    main()
