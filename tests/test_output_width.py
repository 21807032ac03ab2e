"""Everything the commands print fits 80 columns (COLUMNS=80), with words, figures, paths and
names whole: `score`, `eval`, `compare`, `rank` (and `eval` of its store), `bench`, `merge`,
`filter`, `review`, `report`, judged by scripted engines. Prose is checked against the same
command at 1,000 columns (the same words in the same order: lines were only broken at spaces);
tables by the long names they must show whole (a subset name, a path), never cut.

The inputs are made to be wide: subset names of 30 characters without a space, outputs in a
folder with a long name, five judges' worth of figures per line."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from bench_judge import fixture_engine
from click.testing import CliRunner
from helpers import judge_with, quality_engine

from rmjudge.cli import main

SUBSETS = ["Adversarial/Negation-Paraphrase", "Chat-Hard/Refusals-Dangerous-Long",
           "Reasoning/Math-PRM-Long-Chains", "Safety/XSTest-Should-Respond-Set"]
SOURCES = ["helpsteer3-validation-preference", "ultrafeedback-binarized-cleaned"]
FOLDER = "judged-outputs-of-the-relabelling-project"  # 42 characters
BENCH = Path(__file__).parent / "data" / "bench"


def pairs(n: int = 24) -> list[dict]:
    out = []
    for i in range(n):
        good, bad = f"answer {i} q={10 + i % 7}", f"answer {i} q={i % 5}"
        out.append({"id": f"pair-{i:04d}", "prompt": f"question {i}?", "source": SOURCES[i % 2],
                    "subset": SUBSETS[min(i % 7, 3)], "chosen": good, "rejected": bad})
    return out


def candidates(n: int = 4, k: int = 4) -> list[dict]:
    out = []
    for p in range(n):
        vals = [(p * 7 + c * 5) % 11 + c for c in range(k)]
        out.append({"id": f"prompt-{p}", "prompt": f"question {p}", "subset": SUBSETS[p % 2],
                    "responses": [f"answer {c} q={v}" for c, v in enumerate(vals)],
                    "ratings": vals if p != 3 else [1] * k})
    return out


def first_judge():
    """Always picks slot 1 on pair 3: its orders disagree (a flip, a tie)."""
    return quality_engine(flip={"answer 3 q=13", "answer 3 q=3"})


def second_judge():
    return quality_engine(flip={"answer 1 q=11", "answer 1 q=1"})


def write_jsonl(path: Path, objs: list[dict]) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def invoke(args: list, columns: int = 80):
    r = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r


def fits(text: str, width: int = 80) -> None:
    """No line is wider than `width`, but a path longer than the whole width, alone on its
    line (as docs/scoring.md says: it is never cut; here the model in the test's cache)."""
    wide = [line for line in text.splitlines() if len(line) > width
            and not (len(line.split()) == 1 and "/" in line)]
    assert not wide, "\n".join(wide)


def whole(text: str, names: list[str]) -> None:
    """Each name appears whole, and no word of the text is the start of a name cut short
    ("Adversarial/Ne") or its end."""
    words = set(text.split())
    for name in names:
        assert name in text, (name, text)
        if " " in name:
            continue
        cut = [w for w in words if w != name and w not in names and ("/" in w or len(w) >= 12)
               and (name.startswith(w) or name.endswith(w))]
        assert not cut, (name, cut)


def same_words(narrow: str, wide: str) -> None:
    """The 80-column text is the wide text with lines broken at spaces only."""
    assert narrow.split() == wide.split()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The inputs and the judged stores, made once, in a folder used as the working folder."""
    root = tmp_path_factory.mktemp("width")
    (root / FOLDER).mkdir()
    write_jsonl(root / "pairs.jsonl", pairs())
    write_jsonl(root / "candidates.jsonl", candidates())
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        judge_with(mp, first_judge)
        runs = {"score": invoke(["score", "pairs.jsonl", "-o", f"{FOLDER}/first.judged.duckdb",
                                 "--samples", "2"])}
        judge_with(mp, second_judge)
        invoke(["score", "pairs.jsonl", "-o", f"{FOLDER}/second.judged.duckdb", "--samples", "2"])
        for i in range(2):
            invoke(["score", "pairs.jsonl", "-o", f"{FOLDER}/shard-{i}-of-2.judged.duckdb",
                    "--samples", "2", "--shard", f"{i}/2"])
        judge_with(mp, quality_engine)
        runs["rank"] = invoke(["rank", "candidates.jsonl", "-o", f"{FOLDER}/candidates.ranked"
                               ".duckdb", "--samples", "2"])
    return root, runs


@pytest.fixture
def here(world, monkeypatch):
    root, runs = world
    monkeypatch.chdir(root)
    return runs


def test_score_summary_and_status_lines(here, monkeypatch):
    r = here["score"]
    fits(r.output)
    whole(r.stderr, [f"{FOLDER}/first.judged.duckdb"])
    assert "order agreement" in r.stderr
    # the same run's summary at 1,000 columns: the same words, on fewer lines
    judge_with(monkeypatch, first_judge)
    wide = invoke(["score", "pairs.jsonl", "-o", f"{FOLDER}/again.judged.duckdb", "--samples",
                   "2"], columns=1000)
    summary = r.stderr[r.stderr.index("rmjudge: read"):]
    again = wide.stderr[wide.stderr.index("rmjudge: read"):].replace("again", "first")
    assert len(again.splitlines()) < len(summary.splitlines())
    same_words(re.sub(r"[\d.]+ ?s\b|\d+ generated tok/s", "", summary),
               re.sub(r"[\d.]+ ?s\b|\d+ generated tok/s", "", again))


def test_eval_tables_show_whole_subset_names(here):
    store = f"{FOLDER}/first.judged.duckdb"
    r = invoke(["eval", store])
    fits(r.output)
    whole(r.output, [store])
    # the largest group fits beside the overall figures, whole; the others are left out
    assert sum(name in r.output for name in SUBSETS + SOURCES) == 1
    assert "smaller groups not shown" in r.output
    for name in SUBSETS + SOURCES:  # a name is shown whole or not at all
        if name[:12] in r.output:
            whole(r.output, [name])
    # every group asked for: stacked, one line per group, still 80 columns and whole names
    r = invoke(["eval", store, "--max-groups", "8"])
    fits(r.output)
    whole(r.output, SUBSETS + SOURCES)


def test_compare_fits_and_names_each_judge(here):
    a, b = f"{FOLDER}/first.judged.duckdb", f"{FOLDER}/second.judged.duckdb"
    judges = [a, b]
    for n in range(3):  # five judges: the flips table is too wide for 80 columns
        copy = f"{FOLDER}/copy-{n}-of-{'first' if n % 2 else 'second'}.judged.duckdb"
        shutil.copyfile(judges[n % 2], copy)
        judges.append(copy)
    r = invoke(["compare", *judges, "--resamples", "100"])
    fits(r.output)
    whole(r.output, judges)
    assert all(w in r.output for w in ("accuracy,", "pooled", "gain", "kappa"))  # the headers
    assert "pair-0003" in r.output and "pair-0001" in r.output  # flips
    wide = invoke(["compare", *judges, "--resamples", "100"], columns=1000)
    assert "  id         label  judge 1" in wide.output  # the flips table as a table


def test_rank_summary_and_eval_of_the_ranked_store(here):
    ranked = f"{FOLDER}/candidates.ranked.duckdb"
    fits(here["rank"].output)
    whole(here["rank"].stderr, [ranked])
    r = invoke(["eval", ranked, "--resamples", "50"])
    fits(r.output)
    whole(r.output, [ranked])
    assert "1 prompt: gold ranks all equal" in " ".join(r.output.split())


def test_bench_table_and_summaries(here, monkeypatch, tmp_path):
    judge_with(monkeypatch, fixture_engine)
    args = ["bench", "-b", "rewardbench", "-b", "rmbench", "-b", "llmbar",
            "--data", f"rewardbench={BENCH / 'rewardbench.jsonl'}",
            "--data", f"rmbench={BENCH / 'rmbench' / 'total_dataset.json'}",
            "--data", f"llmbar={BENCH / 'llmbar'}", "-o", tmp_path / "bench",
            "--samples", "1", "--no-forced", "--seed", "3"]
    r = invoke(args)
    fits(r.output)
    # the Markdown table, too wide for 80 columns, on its side: one row per column
    assert "| judge | <scripted> |" in r.stdout
    whole(r.stdout, ["| LLMBar Adversarial |", "| avg (RB, RM-Bench, RMB) |"])
    wide = invoke(args[:args.index("-o") + 2] + ["--score-only"], columns=1000)
    assert wide.stdout.splitlines()[0].startswith("| judge | RewardBench | RM-Bench |")


def test_merge(here):
    shards = [f"{FOLDER}/shard-{i}-of-2.judged.duckdb" for i in range(2)]
    out = f"{FOLDER}/merged.judged.duckdb"
    r = invoke(["merge", *shards, "-o", out, "--input", "pairs.jsonl"])
    fits(r.output)
    whole(r.stderr, shards + [out])
    wide = invoke(["merge", *shards, "-o", out, "--input", "pairs.jsonl", "--overwrite"],
                  columns=1000)
    same_words(r.stderr, wide.stderr)


def test_filter(here):
    store, out = f"{FOLDER}/first.judged.duckdb", f"{FOLDER}/first.dpo-with-evidence.jsonl"
    r = invoke(["filter", store, "-o", out, "--evidence"])
    fits(r.output)
    whole(r.stderr, [out])
    wide = invoke(["filter", store, "-o", out, "--evidence"], columns=1000)
    same_words(r.stderr, wide.stderr)


def test_review_export_and_import(here, tmp_path):
    store = f"{FOLDER}/second.judged.duckdb"
    folder = f"{FOLDER}/review-of-the-second-judge"
    r = invoke(["review", "export", store, "-o", folder, "--select", "flipped"])
    fits(r.output)
    whole(r.stderr, [folder])
    labels = Path(folder) / "review.csv"
    with labels.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    with labels.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows([dict(row, human_label="A") for row in rows])
    r = invoke(["review", "import", store, str(labels), "--reviewer", "a-reviewer-with-a-long"
                "-name"])
    fits(r.output)
    r = invoke(["eval", store])  # the judge against the human labels: a table too
    fits(r.output)


def test_report(here):
    store = f"{FOLDER}/first.judged.duckdb"
    r = invoke(["report", store, "-o", f"{FOLDER}/first.report.html"])
    fits(r.output)
    wide = invoke(["report", store, "-o", f"{FOLDER}/first.report.html"], columns=1000)
    same_words(r.stderr, wide.stderr)
    whole(r.stderr, [f"{FOLDER}/first.report.html"])
