"""One warm-start training step with transformers' full causal-LM loss against rmjudge's loss
from the target positions' logits (`training.completion_loss`), and that step and a greedy
generation in float32 against bfloat16 autocast (`--precision`, training/precision.py), in the
same run, on the same model and batch.

    python benchmarks/bench_sft_loss.py [--prompt 400] [--target 60] [--batch 4] [--new 32]
                                        [--repeat 2]

Model: the embedded model as a transformers folder (float32, the GGUF converted once and
cached), a LoRA of rank 8 on every linear layer as `rmjudge-train sft` makes it, one thread.
Each row is `--prompt` tokens (labels -100) and `--target` tokens to learn, the lengths of a
judge prompt and an analysis with its verdict. The generation is `--new` greedy tokens after
each row's prompt, batched as the format check batches them. Prints the CPU seconds of a
forward and backward pass for each loss and precision and of each generation (best of
`--repeat`), the losses, and how many generated tokens the two precisions share. Nothing is
asserted: docs/training.md records the figures with this command. On a CPU without native
bfloat16 the bf16 rows are torch's emulation.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=400)
    ap.add_argument("--target", type=int, default=60)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rmjudge.models.resolve import default_model_path
    from rmjudge.training.completion_loss import completion_loss
    from rmjudge.training.hf import DEFAULT_TARGETS, ModelSource, materialize
    from rmjudge.training.precision import autocast, cpu_has_native_bf16
    from rmjudge.training.sft import pad_collator

    torch.set_num_threads(1)
    folder = materialize(ModelSource.parse(default_model_path()))
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=DEFAULT_TARGETS.split(",")))
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(args.batch):
        p = args.prompt - 10 * i  # rows of different lengths, padded as in training
        ids = torch.randint(10, 49000, (p + args.target,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * p + ids[p:]})
    batch = pad_collator(0)(rows)
    prompt = torch.randint(10, 49000, (args.batch, args.prompt), generator=g)

    def step(loss_of, bf16: bool) -> float:
        model.train()
        model.zero_grad()
        with autocast(model, bf16):
            loss = loss_of()
        loss.backward()
        return float(loss.detach())

    def generate(bf16: bool):
        model.eval()
        with torch.no_grad(), autocast(model, bf16):
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                 do_sample=False, max_new_tokens=args.new,
                                 min_new_tokens=args.new, pad_token_id=0)
        return out[:, args.prompt:]

    def best(fn, *fn_args):
        seconds, value = float("inf"), None
        for _ in range(args.repeat):
            t = time.process_time()
            value = fn(*fn_args)
            seconds = min(seconds, time.process_time() - t)
        return seconds, value

    print(f"batch {args.batch} x ({args.prompt} prompt + {args.target} target tokens); "
          f"CPU with native bfloat16: {cpu_has_native_bf16()}")
    full = lambda: model(**batch).loss  # noqa: E731
    targets = lambda: completion_loss(model, batch)  # noqa: E731
    steps = {}
    for name, loss_of, bf16 in (("full logits fp32", full, False),
                                ("target logits fp32", targets, False),
                                ("target logits bf16", targets, True)):
        steps[name] = best(step, loss_of, bf16)
        s, loss = steps[name]
        print(f"{name:19s} {s:7.2f} s CPU per step (forward + backward), loss {loss:.6f}")
    (a, _), (b, _), (c, _) = steps.values()
    print(f"target logits: {a / b:.2f}x the full logits; bf16: {b / c:.2f}x fp32")
    (g32, t32), (g16, t16) = best(generate, False), best(generate, True)
    print(f"generation of {args.new} greedy tokens: fp32 {g32:.2f} s CPU, bf16 {g16:.2f} s CPU "
          f"({g32 / g16:.2f}x); {int((t32 == t16).sum())} of {t32.numel()} tokens the same")


if __name__ == "__main__":
    main()
