"""Greedy evaluation of a judge (base or base + adapter) on held-out training examples.

Each held-out Pref example is judged in both slot orders, (r1, r2) and (r2, r1): accuracy is the
share of correct verdicts over both orders, positional consistency the share of items correct
in both (docs/reflectrm.md §3). Refl examples are judged in their stored order. A completion
that does not parse counts as wrong and is counted as a parse failure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rmjudge.core.counts import item_accuracy, item_consistency
from rmjudge.prompts import PromptStyle, parse_verdict, pref_messages

from rmjudge.training.hf import greedy_completions
from rmjudge.training.precision import PRECISION_HELP, PRECISIONS, check_precision, use_bf16


@dataclass
class EvalResult:
    pref_items: int = 0
    accuracy: float = 0.0  # Pref, over both orders
    accuracy_ab: float = 0.0
    accuracy_ba: float = 0.0
    positional_consistency: float = 0.0  # Pref items correct in both orders
    refl_items: int = 0
    refl_accuracy: float = 0.0
    parse_failure_rate: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def swapped_prompt(example: dict[str, Any]):
    """The Pref prompt with the responses in the other slots (the suffix and criteria it was
    built with)."""
    r1, r2 = example["responses"]
    return pref_messages(tuple(example["conversation"]), r2, r1, example.get("suffix") or "",
                         PromptStyle(example.get("criteria")))


def evaluate(model, tokenizer, examples: list[dict[str, Any]], max_tokens: int,
             batch_size: int = 8, bf16: bool = False) -> EvalResult:
    pref = [e for e in examples if e["task"] == "pref"]
    refl = [e for e in examples if e["task"] == "refl"]
    prompts = [e["prompt"] for e in pref] + [swapped_prompt(e) for e in pref] + [
        e["prompt"] for e in refl]
    texts = greedy_completions(model, tokenizer, prompts, max_tokens, batch_size, bf16)
    n = len(pref)
    preds_ab = [parse_verdict(t, "pref") for t in texts[:n]]
    preds_ba = [parse_verdict(t, "pref") for t in texts[n:2 * n]]
    preds_refl = [parse_verdict(t, "refl") for t in texts[2 * n:]]
    ok_ab = [p == e["label"] for p, e in zip(preds_ab, pref)]
    ok_ba = [p == 3 - e["label"] for p, e in zip(preds_ba, pref)]
    ok_refl = [p == e["label"] for p, e in zip(preds_refl, refl)]
    res = EvalResult(pref_items=n, refl_items=len(refl))
    if n:
        res.accuracy_ab = round(sum(ok_ab) / n, 4)
        res.accuracy_ba = round(sum(ok_ba) / n, 4)
        res.accuracy = round(sum(item_accuracy(a, b) for a, b in zip(ok_ab, ok_ba)) / n, 4)
        res.positional_consistency = round(
            sum(item_consistency(a, b) for a, b in zip(ok_ab, ok_ba)) / n, 4)
    if refl:
        res.refl_accuracy = round(sum(ok_refl) / len(refl), 4)
    all_preds = preds_ab + preds_ba + preds_refl
    if all_preds:
        res.parse_failure_rate = round(sum(p is None for p in all_preds) / len(all_preds), 4)
    return res


@dataclass(frozen=True)
class EvalJudgeSettings:
    """What `rmjudge-train eval` evaluates (its options are generated from these fields)."""

    model: str = field(metadata={"help": "Base model: HF directory or a .gguf file."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside --model."})
    adapter: str | None = field(default=None, metadata={
        "help": "LoRA adapter directory (none: the base alone)."})
    data: str = field(kw_only=True, metadata={  # required, listed after --adapter
        "help": "Examples (e.g. OUTPUT_DIR/heldout.jsonl)."})
    max_tokens: int = 1024
    limit: int | None = field(default=None, metadata={"help": "Evaluate at most N examples."})
    quantization: str = field(default="none", metadata={"choices": ("nf4", "none")})
    batch: int = field(default=8, metadata={"help": "Prompts per generate call."})
    precision: str = field(default="auto", metadata={
        "help": PRECISION_HELP, "choices": PRECISIONS})

    def __post_init__(self) -> None:
        """Values no evaluation can use are one error before a model loads."""
        from pathlib import Path

        from rmjudge.training.data import DataError

        check_precision(self.precision, DataError)
        for name in ("max_tokens", "batch"):
            if getattr(self, name) < 1:
                raise DataError(f"--{name.replace('_', '-')} must be at least 1")
        if self.limit is not None and self.limit < 1:  # -1 would leave the last example out
            raise DataError("--limit must be at least 1")
        if self.adapter is not None and not (Path(self.adapter) / "adapter_config.json").is_file():
            raise DataError(f"--adapter {self.adapter}: not a PEFT adapter folder (no "
                            "adapter_config.json); give e.g. `rmjudge-train grpo`'s "
                            "OUTPUT/adapter")


def evaluate_judge(s: EvalJudgeSettings) -> EvalResult:
    """Load the base (with the adapter when given) and `evaluate` it on the examples."""
    from rmjudge.core.extras import TRAIN, require

    from rmjudge.training.data import read_examples
    from rmjudge.training.hf import ModelSource, load_base, load_tokenizer, materialize

    examples = read_examples(s.data)[:s.limit] if s.limit else read_examples(s.data)
    if not examples:
        from rmjudge.training.data import DataError

        raise DataError(f"{s.data} holds no examples to evaluate; give the heldout.jsonl of "
                        "`rmjudge-train grpo` or a file of `rmjudge-train build-data`")
    src = ModelSource.parse(s.model, s.gguf_file)
    require("rmjudge-train eval", "train", TRAIN)
    base = materialize(src)
    m = load_base(base, s.quantization)
    if s.adapter:
        from peft import PeftModel

        m = PeftModel.from_pretrained(m, s.adapter)
    m.eval()
    return evaluate(m, load_tokenizer(ModelSource(base)), examples, s.max_tokens, s.batch,
                    use_bf16(s.precision, DataError))
