"""The warm start's loss with logits only where a label is.

A warm-start example is a judge prompt (hundreds of tokens, labels -100) and a short target
completion (the analysis and verdict). transformers' causal-LM loss computes the vocabulary
logits of every position, then ignores the prompt's: for the embedded model that is a
49,152-wide projection and softmax per prompt token, about a third of a training step's CPU.
`completion_loss` asks the model for the logits of the positions from the first one that
predicts a label onwards (`logits_to_keep`, the model's own forward: final norms, soft-capping
and logit scaling of a family all apply) and takes the same cross-entropy over them, so the
loss and its gradients are those of the full computation (tests/test_training_loss.py) and a
step takes less (docs/training.md). A model whose `forward` has no `logits_to_keep` gets the
full computation.
"""

from __future__ import annotations

import inspect

IGNORE = -100


def accepts_logits_to_keep(model) -> bool:
    """Whether `model` (or the model a PEFT wrapper holds) takes `logits_to_keep`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def completion_loss(model, inputs: dict, num_items_in_batch=None):
    """The causal-LM cross-entropy of `inputs` (input_ids, attention_mask, labels with -100 on
    what is not a target): summed over the target tokens and divided by `num_items_in_batch`
    when given (the targets of the whole accumulated batch, as transformers' loss does), else
    their mean. None when `model` cannot keep only some logits (the caller then computes the
    full loss)."""
    import torch
    import torch.nn.functional as F

    labels = inputs["labels"]
    width = labels.shape[1]
    predicting = (labels[:, 1:] != IGNORE).any(dim=0).nonzero()
    if width < 2 or predicting.numel() == 0 or not accepts_logits_to_keep(model):
        return None
    first = int(predicting[0])  # the logits at position p predict the token at p + 1
    out = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                logits_to_keep=width - first)
    logits = out.logits[:, :-1, :].float()  # positions first .. width-2
    target = labels[:, first + 1:].to(logits.device)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")
    if num_items_in_batch is None:
        return loss / (target != IGNORE).sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def completion_loss_trainer():
    """transformers' Trainer whose loss is `completion_loss` (one process; with several, or a
    model without `logits_to_keep`, Trainer's own)."""
    from transformers import Trainer

    class CompletionLossTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not return_outputs and self.accelerator.num_processes == 1:
                # normalized as the model's own loss would be: over the accumulated batch's
                # targets only where Trainer hands the model that count
                items = num_items_in_batch if self.model_accepts_loss_kwargs else None
                loss = completion_loss(model, inputs, items)
                if loss is not None:
                    return loss
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return CompletionLossTrainer
