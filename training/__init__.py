"""Training a ReflectRM judge: optionally warm-start a weak base on the verdict format (`sft`),
build unified Pref + Refl data from the base model's rollouts, then train a QLoRA adapter with
GRPO so that `rmjudge score` judges with it (after export to GGUF).

Installed with the `[train]` extra as `rmjudge.training`; the command is `rmjudge-train` (or
`python -m rmjudge.training`). Prompts and verdict parsing come from `rmjudge.prompts`, the very
ones `rmjudge score` uses.
"""
