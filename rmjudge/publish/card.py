"""The dataset card (README.md) of a dataset written by `rmjudge filter`, from its record.

YAML front matter (license when known, task_categories, tags, size_categories,
source_datasets for a Hub source, configs/data_files naming the one `train` split), then: the
source dataset and, for a Hub dataset, the revision asked for and the commit it resolved to
(recorded by the run), the judge model (file name and sha256) and settings, the filter
settings and counts (kept / swapped / labelled / dropped per reason), the judge's named metrics
(core/counts.py: accuracy, positional consistency, combined-verdict agreement, accuracy with
ties = 0.5) and rollout counts (cut at the token limit, unparsed, forced) against the gold labels
when the pairs had some, and the columns.

Local paths are written as file names only (the card is meant to be published); the sha256
sums and the input fingerprint identify the files.
"""

from __future__ import annotations

import os

import orjson

FORMAT_TEXT = {
    "dpo": ("preference pairs in TRL's DPO form (`prompt`, `chosen`, `rejected`)",
            ["dpo", "preference"]),
    "rm": ("preference pairs in TRL's reward-modelling form (`chosen` and `rejected` as whole "
           "conversations)", ["reward-modeling", "preference"]),
    "kto": ("unpaired preference data in TRL's KTO form (`prompt`, `completion`, `label`: two "
            "rows per pair, the chosen response `true`, the rejected one `false`)",
            ["kto", "preference"]),
}
COLUMN_TEXT = {
    "prompt": "the prompt (a string, or with `--chat` the conversation as `{role, content}` "
              "messages)",
    "chosen": "the response the judge prefers",
    "rejected": "the other response",
    "completion": "one response",
    "label": "true for the response the judge prefers, false for the other",
    "judge_vote_share": "share of the judge's final votes (averaged over both orders) for the "
                        "pair's chosen response",
    "judge_consistent": "the judge gave the same winner in both orders (null: one order); "
                        "order agreement, not the positional consistency metric",
    "judge_verdict_ab": "the judge's verdict with the responses in their input order, relative "
                        "to the pair's chosen response (chosen, rejected, error)",
    "judge_verdict_ba": "the same with the responses swapped",
}
HUB_PREFIX = "hf://datasets/"


def size_category(n: int) -> str:
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
              (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"),
              (1_000_000_000, "100M<n<1B")]
    return next((name for bound, name in bounds if n < bound), "n>1T" if n > 10 ** 12
                else "1B<n<10B")


def sources(record: dict) -> list[str]:
    """The inputs the pairs were judged from, as given to `rmjudge score`."""
    seen = [r.get("input") for r in record.get("runs") or [] if r.get("input")]
    ident = record.get("input") or {}
    if not seen and ident.get("source"):
        seen = [ident["source"]]
    return list(dict.fromkeys(seen))


def hub_repo(source: str) -> str | None:
    """`org/name` of an `hf://datasets/org/name[@revision][?config=..&split=..]` input (or of
    the old `hf://datasets/org/name[:config][@split]`), else None."""
    if not source.startswith(HUB_PREFIX):
        return None
    from rmjudge.io.huggingface import parse_hub_source
    from rmjudge.io.readers import InputError

    try:
        return parse_hub_source(source).repo
    except InputError:
        return None


def _shown(source: str) -> str:
    """A Hub id as given; a local path as its file name (the card is public)."""
    if "://" in source or source == "-":
        return source
    return os.path.basename(source.rstrip("/")) or source


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


_TYPE_TEXT = {"VARCHAR": "string", "BOOLEAN": "bool", "DOUBLE": "float64", "BIGINT": "int64",
              "INTEGER": "int32", 'STRUCT("role" VARCHAR, "content" VARCHAR)[]':
              "messages (list of {role, content})",
              'STRUCT(role VARCHAR, content VARCHAR)[]': "messages (list of {role, content})"}


def type_text(duckdb_type: str) -> str:
    """A column type as the card shows it (Arrow-like names; others as DuckDB writes them)."""
    return _TYPE_TEXT.get(duckdb_type, f"`{duckdb_type}`")


def _pct(st: dict | None) -> str:
    if not st or st.get("value") is None:
        return "-"
    text = f"{100 * st['value']:.1f}"
    if st.get("lo") is not None:
        text += f" [{100 * st['lo']:.1f}, {100 * st['hi']:.1f}]"
    return text


def _judges(record: dict) -> list[dict]:
    out: dict[tuple, dict] = {}
    for r in record.get("runs") or []:
        key = (r.get("model_path"), r.get("model_sha256"), r.get("lora_path"),
               r.get("lora_sha256"))
        if key not in out:
            out[key] = {"model": _shown(r.get("model_path") or "unknown"),
                        "sha256": r.get("model_sha256"),
                        "lora": _shown(r["lora_path"]) if r.get("lora_path") else None,
                        "lora_sha256": r.get("lora_sha256"), "version": r.get("version")}
    return list(out.values())


def criteria_lines(settings: dict) -> list[str]:
    """The card's lines on the judging criteria and the prompt template (docs/scoring.md,
    "Criteria and prompt templates"), from the run's verdict settings; none for the plain
    prompts."""
    from rmjudge.prompts.criteria import builtin_name

    lines = []
    text = settings.get("criteria")
    if text:
        name = builtin_name(text)
        lines.append("- judging criteria (`--criteria`"
                     + (f" {name}, a built-in" if name else "") + "), in both prompts:")
        lines += ["", *(f"  > {line}".rstrip() for line in str(text).splitlines()), ""]
    sha = settings.get("prompt_template_sha256")
    if sha:
        lines.append(f"- prompts worded by a `--prompt-template`, sha256 `{sha}`")
    return lines


def metadata(record: dict, data_path: str, license: str | None, pretty_name: str) -> dict:
    """The card's YAML front matter as a dict."""
    fmt = record.get("format", "dpo")
    repos = [r for r in (hub_repo(s) for s in sources(record)) if r]
    meta: dict = {}
    if license:
        meta["license"] = license
    meta["pretty_name"] = pretty_name
    meta["task_categories"] = ["text-generation"]
    meta["tags"] = FORMAT_TEXT[fmt][1] + ["rmjudge", "reflectrm", "synthetic-labels"]
    meta["size_categories"] = [size_category(int(record["counts"]["rows"]))]
    if repos:
        meta["source_datasets"] = repos
    meta["configs"] = [{"config_name": "default",
                        "data_files": [{"split": "train", "path": data_path}]}]
    return meta


def render_card(record: dict, data_path: str, repo_id: str, license: str | None = None) -> str:
    """The whole README.md: YAML front matter, then the text."""
    from huggingface_hub import DatasetCardData

    name = repo_id.split("/")[-1]
    meta = metadata(record, data_path, license, name)
    configs = meta.pop("configs")
    yaml = DatasetCardData(**meta, configs=configs).to_yaml()
    return f"---\n{yaml}\n---\n\n{body(record, data_path, repo_id, license)}"


def body(record: dict, data_path: str, repo_id: str, license: str | None) -> str:
    """The card's text below the front matter, one section after another."""
    fs = record.get("filter") or {}
    lines = (_intro_lines(record, repo_id) + _source_lines(record, license)
             + _judge_lines(record) + _filter_lines(record["counts"], fs)
             + _eval_lines(record.get("eval"))
             + _column_lines(record, record.get("format", "dpo"), fs, data_path))
    return "\n".join(lines)


def _intro_lines(record: dict, repo_id: str) -> list[str]:
    """The title, what the dataset is and how to load it."""
    c = record["counts"]
    fmt = record.get("format", "dpo")
    lines = [f"# {repo_id.split('/')[-1]}", ""]
    lines.append(
        f"{_upper_first(FORMAT_TEXT[fmt][0])}, {c['written']} pairs ({c['rows']} rows) kept by "
        f"rmjudge {record.get('rmjudge_version', '')} out of "
        f"{c['pairs']} judged: a generative reward model judged every pair in both orders "
        "with ReflectRM (sampled analyses, a self-reflection round against the most confident "
        "one, then a vote), and only the pairs whose verdict passed the filter below were "
        "kept. In every row the chosen response is the judge's winner.")
    lines += ["", "```python", "from datasets import load_dataset", "",
              f'ds = load_dataset("{repo_id}", split="train")', "```", ""]
    return lines


def _source_lines(record: dict, license: str | None) -> list[str]:
    """The input: its names, revision, how it was read, its license."""
    lines = ["## Source", ""]
    srcs = sources(record)
    for s in srcs or ["not recorded"]:
        repo = hub_repo(s)
        link = f" ([{repo}](https://huggingface.co/datasets/{repo}))" if repo else ""
        lines.append(f"- input: `{_shown(s)}`{link}")
    ident = record.get("input") or {}
    rev, commit = ident.get("revision"), ident.get("commit")
    if commit:
        lines.append(f"- revision: {f'`{rev}`' if rev else 'the default branch'}, commit "
                     f"`{commit}`")
    elif rev:
        lines.append(f"- revision: `{rev}`")
    else:
        lines.append("- revision: not recorded by the run" + (
            f"; the input is identified by the fingerprint of its first row, "
            f"`{ident['fingerprint']}`" if ident.get("fingerprint") else ""))
    schemas = list(dict.fromkeys(r.get("schema") for r in record.get("runs") or []
                                 if r.get("schema")))
    for s in schemas:
        lines.append(f"- read as: {s}")
    lines.append(f"- license: {license}" if license else
                 "- license: not known to rmjudge; the source dataset's license applies")
    lines.append("")
    return lines


def _judge_lines(record: dict) -> list[str]:
    """The judge model(s) and the judge settings."""
    lines = ["## Judge", ""]
    judges = _judges(record)
    for j in judges or [{"model": "not recorded", "sha256": None}]:
        text = f"- model: `{j['model']}`"
        if j.get("sha256"):
            text += f", sha256 `{j['sha256']}`"
        if j.get("lora"):
            text += f"; LoRA `{j['lora']}`, sha256 `{j.get('lora_sha256')}`"
        if j.get("version"):
            text += f" (rmjudge {j['version']})"
        lines.append(text)
    settings = record.get("settings")
    encoding = (settings or {}).get("prompt_encoding")
    if encoding:  # judged through a server (docs/serving.md)
        lines.append(f"- prompts reached the judge's server as {encoding}")
    lines += criteria_lines(settings or {})
    if settings:
        lines += ["", "Judge settings (`rmjudge score`):", "", "```json",
                  orjson.dumps(settings, option=orjson.OPT_INDENT_2).decode(), "```"]
    lines.append("")
    return lines


def _filter_lines(c: dict, fs: dict) -> list[str]:
    """The filter's settings and what became of the judged pairs."""
    lines = ["## Filter", ""]
    lines.append("Settings (`rmjudge filter`): " + ", ".join(
        f"{k} = `{v}`" for k, v in fs.items() if k not in ("keep_columns",)) + ".")
    lines += ["", "| outcome | pairs |", "|---|---:|",
              f"| kept (judge agrees with the gold label) | {c['kept']} |",
              f"| swapped (judge confidently disagrees; chosen and rejected exchanged) | "
              f"{c['swapped']} |",
              f"| labelled by the judge (no gold label) | {c['labelled']} |"]
    dropped = c.get("dropped") or {}
    lines.append(f"| dropped | {sum(dropped.values())} |")
    for reason, n in dropped.items():
        lines.append(f"| &nbsp;&nbsp;dropped: {reason} | {n} |")
    lines.append(f"| **total judged** | {c['pairs']} |")
    lines.append("")
    return lines


def _eval_lines(ev: dict | None) -> list[str]:
    """The judge's quality against the gold labels, where the table had labels."""
    if not ev:
        return []
    from rmjudge.core.counts import (ACCURACY, AGREEMENT, CONSISTENCY, METRIC_HELP, TIES_HALF,
                                     rollout_counts_line)

    level = int(round(100 * ev.get("level", 0.95)))
    pooled = ("both orders pooled, the paper's" if ev.get("both_orders")
              else "order (A, B) only, so pooled = single-order accuracy")
    lines = ["## Judge quality against the gold labels", "",
             f"Over all {ev['labelled']} labelled pairs of the judged table (before "
             f"filtering), in %, with {level}% bootstrap intervals:", "",
             "| figure | value |", "|---|---:|",
             f"| {ACCURACY} ({pooled}) | {_pct(ev.get('accuracy'))} |",
             f"| accuracy in order (A, B), responses in input order | "
             f"{_pct(ev.get('accuracy_ab'))} |"]
    if ev.get("both_orders"):
        lines += [f"| accuracy in order (B, A), responses swapped | "
                  f"{_pct(ev.get('accuracy_ba'))} |",
                  f"| {CONSISTENCY} (right in both orders, the paper's) | "
                  f"{_pct(ev.get('consistency'))} |"]
    ag = ev.get("agreement") or {}
    for k in ("agree", "tie", "disagree"):
        if k in ag:
            lines.append(f"| {AGREEMENT}: {k} | {_pct(ag[k])} |")
    if ev.get("accuracy_ties_half"):
        lines.append(f"| {TIES_HALF}, comparable with reward-bench | "
                     f"{_pct(ev['accuracy_ties_half'])} |")
    lines += ["", "; ".join(f"{k}: {v}" for k, v in METRIC_HELP.items()) + "."]
    counts = rollout_counts_line(ev.get("rollout_counts") or {})
    if counts:
        lines += ["", f"Judge rollouts: {counts}."]
    lines.append("")
    return lines


def _column_lines(record: dict, fmt: str, fs: dict, data_path: str) -> list[str]:
    """Every column of the data file with its type and meaning."""
    from rmjudge.analysis.filter import EVIDENCE_COLUMNS, FORMAT_COLUMNS

    lines = ["## Columns", "", "| column | type | meaning |", "|---|---|---|"]
    own = set(FORMAT_COLUMNS[fmt]) | (set(EVIDENCE_COLUMNS) if fs.get("evidence") else set())
    for name, typ in record.get("columns") or []:
        meaning = COLUMN_TEXT[name] if name in own else "carried over from the judged table"
        lines.append(f"| `{name}` | {type_text(typ)} | {meaning} |")
    lines += ["", f"Data file: `{data_path}`.", ""]
    return lines
