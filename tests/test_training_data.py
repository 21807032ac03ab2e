"""The training-data builder (training/data.py) on a scripted rollout engine: slots, dropping
all-correct items, Refl pairs from mixed items, ratio mixing, parse failures, cache resume."""

from __future__ import annotations

import json

import orjson
import pytest
from click.testing import CliRunner
from helpers import first_slot_response

from rmjudge.engine.fake import ScriptedEngine
from rmjudge.prompts import PROMPT_FORMAT, completion_text, parse_verdict
from rmjudge.training.cache import CacheError
from rmjudge.training.data import (DataConfig, DataError, Stats, build_data, mix, read_examples,
                                   stats_path)
from rmjudge.training.rollouts import EngineRollouts, SamplingSettings

# Per item: how many of its 4 rollouts pick the GOOD response, and how many do not parse.
#   easy: 4/4 correct (dropped); mixed: 2 correct + 2 wrong; hard: 0 correct; noisy: 1 correct +
#   3 unparsed (its Refl uses an unparsed rollout's analysis as the incorrect critique).
PLAN = {"easy": (4, 0), "mixed": (2, 0), "hard": (0, 0), "noisy": (1, 3)}


def write_pairs(path, ids):
    with open(path, "w") as f:
        for pid in ids:
            f.write(json.dumps({"id": pid, "prompt": f"question {pid}",
                                "chosen": f"GOOD {pid}", "rejected": f"BAD {pid}"}) + "\n")


def scripted(plan=PLAN):
    """Rollout i of an item is correct when i < n_correct; unparsed when i >= 4 - n_unparsed."""

    def respond(req, i):
        body = req.messages[-1]["content"]
        pid = body.split("question ", 1)[1].split("\n", 1)[0]
        kind = pid.split("-")[0]
        n_ok, n_bad_parse = plan[kind]
        good_slot = 1 if first_slot_response(req).startswith("GOOD") else 2
        if i >= 4 - n_bad_parse:
            return f"analysis {pid} {i} rambles without a verdict"
        pred = good_slot if i < n_ok else 3 - good_slot
        return completion_text("pref", f"analysis {pid} {i}", pred)

    return ScriptedEngine(respond)


def build(tmp_path, ids, ratio="4:1", engine=None, seed=0, name="train.jsonl"):
    src = tmp_path / "pairs.jsonl"
    write_pairs(src, ids)
    eng = engine or scripted()
    rollouts = EngineRollouts(eng, SamplingSettings(samples=4, max_tokens=32, seed=seed))
    out = tmp_path / name
    stats = build_data(str(src), out, rollouts, DataConfig(ratio=ratio, seed=seed, chunk_items=3))
    return stats, read_examples(out), eng


def test_all_correct_items_are_dropped_and_the_rest_give_pref(tmp_path):
    ids = ["easy-1", "easy-2", "mixed-1", "hard-1"]
    stats, ex, _ = build(tmp_path, ids, ratio="1:0")
    assert stats.all_correct_dropped == 2
    assert stats.all_incorrect == 1 and stats.mixed == 1
    assert sorted(e["source_id"] for e in ex) == ["hard-1", "mixed-1"]
    assert all(e["task"] == "pref" for e in ex)
    for e in ex:  # the label names the slot holding the chosen response
        assert e["responses"][e["label"] - 1].startswith("GOOD")
        assert f"### Response {e['label']}\nGOOD" in e["prompt"][-1]["content"]


def test_refl_pairs_a_correct_and_an_incorrect_analysis_with_the_right_label(tmp_path):
    stats, ex, _ = build(tmp_path, [f"mixed-{i}" for i in range(12)], ratio="1:1")
    refl = [e for e in ex if e["task"] == "refl"]
    assert stats.mixed == 12 and stats.refl_built == 12 and len(refl) == 12
    for e in refl:
        body = e["prompt"][-1]["content"]
        c1 = body.split("### Critique 1\n", 1)[1].split("\n\n### Critique 2", 1)[0]
        c2 = body.split("### Critique 2\n", 1)[1].split("\n\n## Your verdict", 1)[0]
        good_idx, bad_idx = (0, 1) if e["label"] == 1 else (1, 0)
        # rollouts 0-1 were correct, 2-3 wrong (see PLAN)
        assert int([c1, c2][good_idx].rsplit(" ", 1)[1]) < 2
        assert int([c1, c2][bad_idx].rsplit(" ", 1)[1]) >= 2
        assert e["critique_rollouts"][e["label"] - 1] < 2
        # the critiques judge the responses in the same slots as the Pref prompt
        assert "### Response 1\n" + e["responses"][0] in body
    assert {e["label"] for e in refl} == {1, 2}  # random order, both slots used


def test_parse_failures_count_as_incorrect_and_are_reported(tmp_path):
    stats, ex, _ = build(tmp_path, ["noisy-1", "easy-1"], ratio="1:1")
    assert stats.parse_failures == 3 and stats.rollouts == 8
    assert stats.parse_failure_rate == pytest.approx(3 / 8)
    assert stats.mixed == 1 and stats.all_correct_dropped == 1
    refl = [e for e in ex if e["task"] == "refl"]
    assert len(refl) == 1
    body = refl[0]["prompt"][-1]["content"]
    assert "rambles without a verdict" in body  # the only incorrect critiques were unparsed
    assert parse_verdict(body, "refl") is None  # the prompt itself holds no verdict


def test_ratio_subsamples_pref_when_refl_is_scarce(tmp_path):
    ids = [f"mixed-{i}" for i in range(2)] + [f"hard-{i}" for i in range(10)]
    stats, ex, _ = build(tmp_path, ids, ratio="4:1")
    assert stats.pref_available == 12 and stats.refl_built == 2
    assert (stats.pref_kept, stats.refl_kept) == (8, 2)
    assert stats.limited_by == "refl" and stats.final_ratio == "4.00:1"
    assert sum(e["task"] == "pref" for e in ex) == 8


def test_mix_subsamples_refl_when_pref_is_scarce():
    pref = [{"id": f"p{i}", "task": "pref", "label": 1} for i in range(4)]
    refl = [{"id": f"r{i}", "task": "refl", "label": 2} for i in range(4)]
    st = Stats()
    out = mix(pref, refl, "4:1", 0, st)
    assert (st.pref_kept, st.refl_kept, st.limited_by) == (4, 1, "pref")
    assert len(out) == 5
    st = Stats()
    assert len(mix(pref, [], "4:1", 0, st)) == 4 and "ratio not met" in st.limited_by


def test_output_is_reproducible_and_labels_are_balanced(tmp_path):
    ids = [f"hard-{i}" for i in range(40)]
    _, ex1, _ = build(tmp_path, ids, ratio="1:0", name="a.jsonl")
    _, ex2, _ = build(tmp_path, ids, ratio="1:0", name="b.jsonl")
    assert ex1 == ex2
    ones = sum(e["label"] == 1 for e in ex1)
    assert 10 <= ones <= 30  # slot of the chosen response drawn per item, not fixed


def test_rerun_resumes_from_the_rollout_cache(tmp_path):
    ids = [f"mixed-{i}" for i in range(5)]
    stats1, ex1, eng1 = build(tmp_path, ids)
    assert sum(len(c) for c in eng1.calls) == 5
    assert len(eng1.calls) == 2  # chunk_items=3: many items per generate call
    # a crash left a torn line at the end of the cache: it is skipped, the rest is reused
    cache = tmp_path / "train.jsonl.rollouts.jsonl"
    with open(cache, "ab") as f:
        f.write(b'{"id": "mixed-9", "texts": ["half')
    stats2, ex2, eng2 = build(tmp_path, ids + ["mixed-5"])
    assert sum(len(c) for c in eng2.calls) == 1  # only the new item was sampled
    assert stats2.items_from_cache == 5
    lines = [orjson.loads(x) for x in cache.read_bytes().splitlines()[1:] if x.startswith(b'{"id"')
             and x.endswith(b"}")]
    assert {r["id"] for r in lines} >= set(ids) | {"mixed-5"}


def test_cache_made_with_other_settings_is_refused(tmp_path):
    build(tmp_path, ["mixed-1"])
    with pytest.raises(CacheError, match="temperature|seed"):
        build(tmp_path, ["mixed-1"], seed=1)


def test_no_example_is_an_error_with_stats_written(tmp_path):
    with pytest.raises(DataError, match="all its rollouts"):
        build(tmp_path, ["easy-1", "easy-2"])
    st = json.loads(stats_path(tmp_path / "train.jsonl").read_text())
    assert st["all_correct_dropped"] == 2


def test_no_example_leaves_no_training_file_and_removes_an_earlier_builds(tmp_path):
    """With no example, build-data wrote an empty training file; now none, and the file an
    earlier build wrote there (its stats replaced) is not left as if it were this build's."""
    from rmjudge.training.data import is_own_stats

    out = tmp_path / "train.jsonl"
    with pytest.raises(DataError) as exc:
        build(tmp_path, ["easy-1", "easy-2"])
    assert not out.exists()
    assert f"no training file was written ({out}), stats in {stats_path(out)}" in str(exc.value)
    assert is_own_stats(stats_path(out))
    build(tmp_path, ["mixed-1", "hard-1"])
    assert out.exists()
    with pytest.raises(DataError):
        build(tmp_path, ["easy-3"])
    assert not out.exists() and json.loads(stats_path(out).read_text())["output"] is None


def test_build_data_with_no_labelled_pair_is_refused_before_anything_loads(tmp_path):
    from rmjudge.training.cli import main

    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"prompt": "q", "response_a": "a", "response_b": "b"}) + "\n")
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(main, ["build-data", str(src), "-o", str(out),
                                    "--model", str(tmp_path / "missing.gguf")])
    assert res.exit_code == 1
    assert res.output == (f"Error: no training example can be built from {src}: no labelled "
                          "pair (1 row read, 1 unlabelled, 0 bad); give labelled pairs "
                          "(chosen/rejected or a label column); nothing was written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]


@pytest.mark.parametrize("where", ["-o", "--cache"])
def test_an_unwritable_output_or_cache_is_one_error_line_exit_4(tmp_path, where):
    """`-o /proc/nope/bd.jsonl` (and a read-only mount) gave a traceback once the model had
    loaded: one `Error:` line, exit 4, before anything loads."""
    import os
    import subprocess

    from rmjudge.training.cli import main

    write_pairs(tmp_path / "p.jsonl", ["mixed-1"])
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
                       check=False)
    else:
        ro.chmod(0o555)
    try:
        for bad in ("/proc/nope/bd.jsonl", str(ro / "bd.jsonl")):
            out, cache = (bad, None) if where == "-o" else (str(tmp_path / "o.jsonl"), bad)
            args = ["build-data", str(tmp_path / "p.jsonl"), "-o", out,
                    "--model", str(tmp_path / "missing.gguf")]
            res = CliRunner().invoke(main, args + (["--cache", cache] if cache else []))
            assert res.exit_code == 4, res.output
            assert res.output.startswith(f"Error: cannot write {bad}: ") and \
                res.output.endswith(f"nothing was written: choose a writable {where}\n")
            assert res.output.count("\n") == 1 and "Traceback" not in res.output
    finally:
        if os.path.ismount(ro):
            subprocess.run(["umount", str(ro)], check=False)
    assert not (tmp_path / "o.jsonl").exists()


def test_parquet_output_round_trips(tmp_path):
    _, ex, _ = build(tmp_path, ["mixed-1", "hard-1"], ratio="1:1", name="t.parquet")
    assert {e["task"] for e in ex} == {"pref", "refl"}
    assert all(isinstance(e["prompt"], list) and e["prompt"][0]["role"] == "user" for e in ex)


def test_cli_reports_bad_ratio_without_traceback(tmp_path):
    from rmjudge.training.cli import main

    write_pairs(tmp_path / "p.jsonl", ["mixed-1"])
    res = CliRunner().invoke(main, ["build-data", str(tmp_path / "p.jsonl"), "-o",
                                    str(tmp_path / "o.jsonl"), "--ratio", "4-1"])
    assert res.exit_code == 1
    assert "--ratio '4-1' must look like PREF:REFL" in res.output


@pytest.mark.parametrize("option,value,message", [
    ("--max-tokens", "0", "Error: --max-tokens must be at least 8"),
    ("--temperature", "-1", "Error: --temperature must be between 0 and 5"),
])
def test_cli_refuses_rollout_settings_no_rollout_can_use(tmp_path, option, value, message):
    """Before, --max-tokens 0 sampled empty rollouts and wrote a training file of them."""
    from rmjudge.training.cli import main

    write_pairs(tmp_path / "p.jsonl", ["mixed-1"])
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(main, ["build-data", str(tmp_path / "p.jsonl"), "-o", str(out),
                                    "--model", str(tmp_path / "missing.gguf"), option, value])
    assert res.exit_code == 1
    assert res.output.strip() == message
    assert not out.exists()


def test_grpo_cli_names_bad_settings_and_missing_checkpoints(tmp_path):
    from rmjudge.training.cli import main

    base = ["grpo", "--model", "m", "--data", str(tmp_path / "d.jsonl"), "-o", str(tmp_path / "r")]
    res = CliRunner().invoke(main, base + ["--micro-batch", "3"])
    assert res.exit_code == 1
    assert "--micro-batch must divide --generation-prompts x --num-generations (64)" in res.output
    res = CliRunner().invoke(main, base + ["--resume"])
    assert res.exit_code == 1 and "--resume: no checkpoint in" in res.output
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 1 and "training data not found" in res.output


def test_grpo_with_fewer_training_examples_than_one_batch_is_an_error_before_any_work(tmp_path):
    """4 examples, --eval-fraction 0.25, --batch-size 2: one training example is less than one
    step's prompts, so TRL would train 0 steps and save an untouched adapter. It must be an
    error naming the sizes, before the model is loaded (the model path here does not exist)."""
    from rmjudge.training.cli import main
    from rmjudge.training.data import write_examples
    from rmjudge.training.grpo import is_heldout

    # four source items of which exactly one lands in the training split at 0.25
    ids, held = [], 0
    for i in range(200):
        sid = f"item-{i}"
        h = is_heldout(sid, 0.25, 0)
        if (h and held < 3) or (not h and len(ids) - held < 1):
            ids.append(sid)
            held += h
        if len(ids) == 4:
            break
    assert held == 3
    ex = [{"id": f"{s}#pref", "task": "pref", "source_id": s, "label": 1,
           "prompt": [{"role": "user", "content": f"q {s}"}], "conversation": [],
           "responses": ["a", "b"], "suffix": "", "critique_rollouts": None,
           "prompt_format": PROMPT_FORMAT} for s in ids]
    write_examples(ex, tmp_path / "d.jsonl")
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["grpo", "--model", str(tmp_path / "no-such-model"), "--data",
                                    str(tmp_path / "d.jsonl"), "-o", str(out), "--batch-size", "2",
                                    "--generation-prompts", "2", "--num-generations", "2",
                                    "--micro-batch", "4", "--eval-fraction", "0.25"])
    assert res.exit_code == 1, res.output
    assert "Error:" in res.output and "Traceback" not in res.output
    msg = res.output
    assert "1 training example" in msg and "--batch-size 2" in msg
    assert "3 held out" in msg and "--eval-fraction" in msg
    assert not (out / "adapter").exists()
