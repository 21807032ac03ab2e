# shellcheck shell=bash
# Sourced by the example pipelines (train_judge.sh, train_demo_adapter.sh): `step`, which runs
# a step unless its output exists, so a rerun resumes, and records its wall time in
# "$out/times.tsv" (`out`: the pipeline's output folder).

# step NAME DONE_PATH COMMAND...: run COMMAND unless DONE_PATH exists; record its wall time
step() {
  local name=$1 done_path=$2; shift 2
  if [ -e "$done_path" ]; then echo "== $name: done ($done_path)"; return; fi
  echo "== $name"
  local t0; t0=$(date +%s)
  "$@"
  printf '%s\t%s\n' "$name" "$(( $(date +%s) - t0 ))" >> "$out/times.tsv"
}
