#!/usr/bin/env bash
# The demo format adapter shipped with rmjudge (rmjudge/models/adapters/), end to end from the
# licensed development data: split -> templated format warm-start (rmjudge-train sft
# --analyses template, a LoRA on the embedded SmolLM2-135M) -> GGUF LoRA export -> held-out
# scoring at the demo's settings -> the parse rates, anchors, reflections and accuracy
# (OUT_DIR/table.md) -> the example pairs judged with and without the adapter (judging time).
# Every step is seeded and deterministic in its data. Needs `pip install '.[train,export,model]'`.
#
#   examples/train_demo_adapter.sh OUT_DIR [DATA_DIR]     # DATA_DIR: default ../shared/data
#
# Sizes come from the environment; the defaults built the shipped adapter (docs/training.md,
# "The demo format adapter"), sized for a 2-core CPU:
#   SEED=0 THREADS=1 TRAIN_ROWS=24 TEST_ROWS=24 MAX_CHARS=600   the split (by prompt)
#   EPOCHS=1 BATCH=4 LR=2e-3 RANK=8 ALPHA=16 MAX_LENGTH=768     the warm-start (4 examples/row)
#   SAMPLES=8 MAX_TOKENS=256                                    scoring: the demo's settings
#   INSTALL=1 copies the adapter into rmjudge/models/adapters/ (then set DEMO_ADAPTER_SHA256 in
#   rmjudge/models/resolve.py to the sha256 this script prints).
# A step whose output exists is skipped, so a rerun resumes; wall times go to OUT_DIR/times.tsv.
set -euo pipefail

out=${1:?usage: examples/train_demo_adapter.sh OUT_DIR [DATA_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
data=${2:-$here/../../shared/data}
seed=${SEED:-0}
threads=${THREADS:-1}  # one thread: on a busy 2-core machine two OpenMP threads wait on each other
base=$(python -c "from rmjudge.models.resolve import default_model_path; print(default_model_path())")
export OMP_NUM_THREADS=$threads
mkdir -p "$out"

# shellcheck source=examples/steps.sh
source "$here/steps.sh"  # step NAME DONE_PATH COMMAND...

# 1. split by prompt; neither split holds a prompt of the demo's examples/pairs.jsonl
step split "$out/test.jsonl" python "$here/split_pairs.py" "$out" \
  "$data/pandalm/pairs.jsonl" "$data/hh-rlhf/pairs.jsonl" --exclude "$here/pairs.jsonl" \
  --train "${TRAIN_ROWS:-24}" --test "${TEST_ROWS:-24}" --max-chars "${MAX_CHARS:-600}" \
  --seed "$seed"

# 2. format warm-start on templated targets (training/sft_templates.py): no base rollouts
step warm-start "$out/sft/sft.json" rmjudge-train sft "$out/train.jsonl" -o "$out/sft" \
  --model "$base" --analyses template --seed "$seed" --lora-r "${RANK:-8}" \
  --lora-alpha "${ALPHA:-16}" --epochs "${EPOCHS:-1}" --batch-size "${BATCH:-4}" \
  --micro-batch "${BATCH:-4}" --learning-rate "${LR:-2e-3}" --warmup-ratio 0 \
  --max-length "${MAX_LENGTH:-768}" --check-items 0 --save-steps 8 \
  --threads "$threads"

# 3. the GGUF LoRA (f16: a few MB) that llama.cpp applies to the embedded GGUF
step export "$out/demo.lora.gguf" rmjudge-export lora "$out/sft/adapter" --base "$base" \
  -o "$out/demo.lora.gguf" --outtype f16

# 4. held-out pairs and the demo's examples at the demo's settings (N 8, both orders, 256
#    tokens, temperature 1, forced verdicts only as the fallback); --model/--lora explicit, so
#    the fresh adapter is measured whatever is installed
demo=(--model "$base" --lora "$out/demo.lora.gguf" --samples "${SAMPLES:-8}"
      --max-tokens "${MAX_TOKENS:-256}" --forced --seed "$seed" --threads "$threads" --quiet)
step heldout "$out/heldout.duckdb" rmjudge score "$out/test.jsonl" -o "$out/heldout.duckdb" \
  "${demo[@]}" --commit-every 1
# the examples with and without the adapter, started together so that they share the load
examples() {
  rmjudge score "$here/pairs.jsonl" -o "$out/examples.duckdb" "${demo[@]}" &
  rmjudge score "$here/pairs.jsonl" -o "$out/examples-without.duckdb" --model "$base" \
    --samples "${SAMPLES:-8}" --seed "$seed" --threads "$threads" --quiet &
  wait
}
step examples "$out/examples-without.duckdb" examples

# 5. the table
python "$here/demo_adapter_table.py" "$out/heldout.duckdb" "$out/examples.duckdb" \
  "$out/examples-without.duckdb" | tee "$out/table.md"
python "$here/demo_adapter_table.py" --json "$out/heldout.duckdb" "$out/examples.duckdb" \
  "$out/examples-without.duckdb" > "$out/table.jsonl"
sha=$(python -c "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())" "$out/demo.lora.gguf")
echo "adapter: $out/demo.lora.gguf sha256 $sha ($(wc -c < "$out/demo.lora.gguf") bytes)"
if [ "${INSTALL:-0}" = 1 ]; then
  cp "$out/demo.lora.gguf" "$here/../rmjudge/models/adapters/smollm2-135m-demo-format.lora.gguf"
  echo "installed: set DEMO_ADAPTER_SHA256 = \"$sha\" in rmjudge/models/resolve.py"
fi
