"""The results table of examples/train_judge.sh, as Markdown on stdout.

    python examples/train_table.py OUT_DIR base warm grpo [rft]

Reads OUT_DIR/score/<judge>.eval.json (`rmjudge eval --json`), the judged stores for parse
failures and slot-1 shares, the training summaries (warm/sft.json, <judge>/training.json and
log.jsonl) and OUT_DIR/times.tsv (wall seconds per step). Training times are the trainers'
own `train_runtime` (optimizer steps and, for GRPO, its generation), without the rollouts of
the warm-start's data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb

from rmjudge.analysis import compare
from rmjudge.analysis.tables import open_judged

NAMES = {"base": "base (embedded SmolLM2-135M Q4_1)", "warm": "warm-start (SFT LoRA)",
         "grpo": "warm-start + GRPO", "rft": "warm-start + RFT (Pref only)"}


def ci(m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "-"
    v = f"{100 * m['value']:.1f}%"
    if m.get("lo") is not None:
        v += f" [{100 * m['lo']:.1f}, {100 * m['hi']:.1f}]"
    return v


def store_counts(path: Path) -> tuple[int, int, int, int]:
    """(rollouts, rollouts without a parsed verdict, verdicts in slot 1, verdicts)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        n, bad, slot1, parsed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE verdict_source <> 'generated'), "
            "count(*) FILTER (WHERE prediction = 1), count(prediction) "
            "FROM samples WHERE stage = 'rollout'").fetchone()
    finally:
        con.close()
    return n, bad, slot1, parsed


def per_pair_correct(path: Path) -> dict[str, float]:
    """Per labelled pair of a judged store: the share of its orders judged correctly
    (rmjudge.analysis.compare, as `rmjudge compare` computes it)."""
    with open_judged(str(path)) as t:
        return compare.per_pair_correct(t)


def last_log(path: Path, key: str):
    if not path.exists():
        return None
    val = None
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if key in rec:
            val = rec[key]
    return val


def sft_tokens(out: Path, sft: dict) -> tuple[int, int]:
    """(example tokens, target tokens) of the warm-start: from sft.json, or (for a summary
    written before it recorded them) counted again from sft_data.jsonl exactly as the stage
    tokenized it."""
    if sft.get("example_tokens") is not None:
        return sft["example_tokens"], sft["target_tokens"]
    from rmjudge.training.hf import ModelSource, load_tokenizer
    from rmjudge.training.sft import SFTStats, tokenize_examples

    tok = load_tokenizer(ModelSource(sft["base_model_dir"]))
    examples = [json.loads(x) for x in (out / "warm" / "sft_data.jsonl").read_text().splitlines()]
    rows = tokenize_examples(examples, tok, sft["settings"]["max_length"], SFTStats())
    return (sum(len(r["input_ids"]) for r in rows),
            sum(sum(x != -100 for x in r["labels"]) for r in rows))


def training(out: Path, judge: str, times: dict[str, int]) -> str:
    if judge == "base":
        return "-"
    sft = json.loads((out / "warm" / "sft.json").read_text())
    sft_s = round(sft["train_metrics"]["train_runtime"])
    tokens, target = sft_tokens(out, sft)
    text = (f"SFT: {sft['steps']} steps on {sft['train_examples']} examples "
            f"({tokens} tokens, {target} of them target), {sft_s} s")
    if judge in ("grpo", "rft"):
        summ = json.loads((out / judge / "training.json").read_text())
        tokens = last_log(out / judge / "log.jsonl", "num_tokens")
        data_key = "build-data" if judge == "grpo" else "build-data-rft"
        text += (f"; build-data {times.get(data_key)} s; GRPO: {summ['steps']} steps "
                 f"({int(tokens) if tokens else '?'} tokens), "
                 f"{round(summ['train_metrics']['train_runtime'])} s")
    return text


def main() -> None:
    out = Path(sys.argv[1])
    judges = sys.argv[2:] or ["base", "warm", "grpo"]
    times: dict[str, int] = {}
    if (out / "times.tsv").exists():
        for line in (out / "times.tsv").read_text().splitlines():
            name, secs = line.split("\t")
            times[name] = times.get(name, 0) + int(secs)
    rows = ["| judge | parse failures | verdicts in slot 1 | accuracy, both orders pooled "
            "[95% CI] | gain over the base [paired 95% CI] | positional consistency [95% CI] | "
            "combined-verdict agreement | scoring time | training |",
            "|---|---|---|---|---|---|---|---|---|"]
    base_correct = per_pair_correct(out / "score" / "base.duckdb")
    for j in judges:
        ev = json.loads((out / "score" / f"{j}.eval.json").read_text())
        systems = {s["key"]: s["metrics"]["overall"] for s in ev["systems"]}
        refl = systems.get("reflectrm", {})
        n, bad, slot1, parsed = store_counts(out / "score" / f"{j}.duckdb")
        gain = "-"
        if j != "base":
            g, lo, hi = compare.paired_gain(base_correct, per_pair_correct(out / "score" / f"{j}.duckdb"))
            gain = f"{100 * g:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        rows.append(
            f"| {NAMES.get(j, j)} | {bad}/{n} ({100 * bad / max(n, 1):.1f}%) | "
            f"{100 * slot1 / max(parsed, 1):.1f}% | {ci(refl.get('acc'))} | {gain} | "
            f"{ci(refl.get('consistency'))} | {ci(systems.get('final', {}).get('agree'))} | "
            f"{times.get('score-' + j, '-')} s | {training(out, j, times)} |")
    print(f"{ev['labelled']} held-out pairs, both orders; bootstrap 95% intervals "
          f"({ev['settings']['resamples']} resamples).\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
