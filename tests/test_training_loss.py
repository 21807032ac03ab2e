"""The warm start's loss from the target positions' logits only (training/completion_loss.py):
the same loss and the same gradients as transformers' full causal-LM loss, on padded batches
whose targets start at different places, per batch and over accumulated batches."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft"))
pytestmark = [pytest.mark.hf,
              pytest.mark.skipif(not HAS_TRAIN, reason="training extras missing: pip install "
                                                       "'.[train]'")]


def _model(family: str = "llama"):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(family, vocab_size=97, hidden_size=32, intermediate_size=48,
                               num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=128,
                               tie_word_embeddings=True)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                           target_modules=["q_proj", "v_proj", "up_proj"]))


def _batch(seed: int, prompts=(20, 9, 14), targets=(5, 7, 3)):
    """Right-padded rows: a prompt (labels -100) then a target; rows of different lengths."""
    import torch

    from rmjudge.training.sft import pad_collator

    g = torch.Generator().manual_seed(seed)
    rows = []
    for p, t in zip(prompts, targets):
        ids = torch.randint(3, 97, (p + t,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * p + ids[p:]})
    return pad_collator(0)(rows)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("items", [None, 23])
def test_the_loss_and_its_gradients_are_the_full_computations(items):
    import torch

    from rmjudge.training.completion_loss import accepts_logits_to_keep, completion_loss

    model = _model()
    assert accepts_logits_to_keep(model)
    batch = _batch(1)
    kw = {} if items is None else {"num_items_in_batch": torch.tensor(items)}
    full = model(**batch, **kw).loss
    full.backward()
    want = _grads(model)
    model.zero_grad()
    got = completion_loss(model, batch, kw.get("num_items_in_batch"))
    got.backward()
    assert torch.allclose(got, full, rtol=1e-5, atol=1e-6), (got, full)
    grads = _grads(model)
    assert want.keys() == grads.keys() and want
    for name, g in grads.items():
        assert torch.allclose(g, want[name], rtol=1e-4, atol=1e-6), name


def test_a_batch_without_targets_falls_back_to_the_full_loss():
    from rmjudge.training.completion_loss import completion_loss

    batch = _batch(2)
    batch["labels"][:] = -100
    assert completion_loss(_model(), batch) is None


def test_training_steps_match_the_default_trainer(tmp_path):
    """Two optimizer steps of two accumulated micro-batches each: the same losses and the same
    LoRA weights as transformers' Trainer with its own loss."""
    import torch
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    from rmjudge.training.completion_loss import completion_loss_trainer
    from rmjudge.training.sft import pad_collator

    rows = []
    for seed in range(8):
        b = _batch(seed, prompts=(6 + seed, 12), targets=(2 + seed % 3, 4))
        for i in range(2):
            n = int(b["attention_mask"][i].sum())
            rows.append({"input_ids": b["input_ids"][i, :n].tolist(),
                         "labels": b["labels"][i, :n].tolist()})
    results = []
    for cls in (Trainer, completion_loss_trainer()):
        model = _model()
        args = TrainingArguments(output_dir=str(tmp_path / cls.__name__), max_steps=2,
                                 per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                 learning_rate=5e-2, use_cpu=True, report_to="none",
                                 logging_steps=1, save_strategy="no", seed=0, data_seed=0,
                                 remove_unused_columns=False, disable_tqdm=True)
        trainer = cls(model=model, args=args, train_dataset=Dataset.from_list(rows),
                      data_collator=pad_collator(0))
        trainer.train()
        losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
        lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
        results.append((losses, lora))
    (want_losses, want), (got_losses, got) = results
    assert len(got_losses) == 2 and got_losses == pytest.approx(want_losses, rel=1e-5)
    for name in want:
        assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-6), name
