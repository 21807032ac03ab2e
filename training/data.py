"""Unified ReflectRM training data (docs/reflectrm.md §4): Pref + Refl examples from rollouts.

Pipeline, per labelled item of the input (any format `rmjudge score` reads):
1. put the preferred response in slot 1 or 2, drawn from (seed, item id): labels are balanced
   and the choice does not depend on the file order;
2. sample N rollouts from the base model (cached per item id, so a rerun resumes);
3. a rollout is correct when `parse_verdict(text, "pref")` equals the label; a rollout that does
   not parse counts as incorrect (it is what the reward will give it in GRPO) and is counted in
   the stats as a parse failure;
4. items whose rollouts are all correct are dropped (too easy); the others give Pref examples;
5. each mixed-outcome item (some correct, some incorrect) gives exactly one Refl example: the
   analysis of a correct rollout against the analysis of an incorrect one, in random order,
   label = the correct one's slot. The incorrect critique is drawn from the rollouts with a
   wrong parsed verdict when there are any, else from the parse failures; critiques with an
   empty analysis are never used, and an item left without a usable pair gives no Refl;
6. Pref : Refl mixed at the requested ratio (4:1 by default, 1:0 for the RFT baseline): all of
   the scarcer kind are kept and the other is subsampled to the ratio; the stats say which.

Every random choice is seeded from (seed, item id), so the output is reproducible. Every example
records the prompt format it was rendered in (`prompt_format`, `rmjudge.prompts.PROMPT_FORMAT`)
and, when the rollouts were prompted with judging criteria (`--criteria`), their text
(`criteria`; both tasks' prompts carry it),
and so do the stats file and the rollout cache: GRPO refuses data of another format, and the
adapter it trains carries the format on to scoring.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from rmjudge.io.intake import RowFailure
from rmjudge.io.mapping import Mapper
from rmjudge.prompts import (PROMPT_FORMAT, PromptStyle, extract_analysis, parse_verdict,
                             pref_messages, refl_messages)
from rmjudge.runs.setup import open_input
from rmjudge.core.seeds import derive_seed
from rmjudge.core.words import count

from rmjudge.training.cache import CachedRollouts, RolloutCache
from rmjudge.training.rollouts import Item, RolloutSource


class DataError(UserError):
    """The data cannot be built as asked; the message says how to fix it."""


def parse_ratio(text: str) -> tuple[int, int]:
    """'4:1' -> (4, 1). Pref must be > 0; Refl may be 0 (the RFT baseline)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise DataError(f"--ratio {text!r} must look like PREF:REFL, e.g. 4:1 or 1:0") from None
    if a <= 0 or b < 0:
        raise DataError(f"--ratio {text!r}: PREF must be at least 1 and REFL at least 0")
    return a, b


@dataclass(frozen=True)
class DataConfig:
    ratio: str = field(default="4:1", metadata={"help": "Pref:Refl mix; 1:0 is the RFT baseline."})
    seed: int = field(default=0, metadata={"help": "Seed of slots, pair choices and mixing."})
    limit: int | None = field(default=None, metadata={"help": "Read at most this many rows."})
    mapping: dict[str, str] = field(default_factory=dict,
                                    metadata={"help": "Column mapping, as `rmjudge score --map`."})
    chunk_items: int = field(default=16, metadata={
        "help": "Items per generate call (the engine batches their samples together)."})

    def __post_init__(self) -> None:
        parse_ratio(self.ratio)
        if self.limit is not None and self.limit < 1:
            raise DataError("--limit must be at least 1")
        if self.chunk_items < 1:
            raise DataError("--chunk-items must be at least 1")


@dataclass
class Outcome:
    """What the rollouts of one item say."""

    item: Item
    predictions: list[int | None]
    analyses: list[str]

    @property
    def correct(self) -> list[bool]:
        return [p == self.item.label for p in self.predictions]


@dataclass
class Stats:
    rows_read: int = 0
    rows_bad: int = 0
    rows_unlabelled: int = 0
    items: int = 0
    items_unsampled: int = 0  # e.g. too long for the model's context
    items_from_cache: int = 0
    rollouts: int = 0
    rollouts_correct: int = 0
    parse_failures: int = 0
    parse_failure_rate: float = 0.0
    base_accuracy: float = 0.0  # share of correct rollouts
    all_correct_dropped: int = 0
    all_incorrect: int = 0
    mixed: int = 0
    pref_available: int = 0
    refl_built: int = 0
    refl_unusable: int = 0  # mixed items without two non-empty, different critiques
    pref_kept: int = 0
    refl_kept: int = 0
    ratio_requested: str = "4:1"
    final_ratio: str = ""
    limited_by: str = ""  # which kind was scarce and kept whole
    pref_label_1: int = 0
    refl_label_1: int = 0
    rollout_settings: dict[str, Any] = field(default_factory=dict)
    prompt_format: int = PROMPT_FORMAT

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def assign_slots(pair, seed: int) -> Item | None:
    """The item with its preferred response in a seeded random slot (None when unlabelled)."""
    if pair.label not in ("A", "B"):
        return None
    good, bad = (pair.response_a, pair.response_b) if pair.label == "A" else (
        pair.response_b, pair.response_a)
    if derive_seed(seed, pair.id, "train-slot") & 1:
        return Item(pair.id, pair.messages, bad, good, 2)
    return Item(pair.id, pair.messages, good, bad, 1)


def read_items(source: str, config: DataConfig, stats: Stats) -> Iterator[Item]:
    """Labelled items of `source` (rows that cannot be used are counted, not fatal)."""
    mapper = Mapper(config.mapping, config.seed)
    intake = open_input(source, mapper, config.limit)
    for pair in intake:  # duplicate ids would share one cache entry: the intake drops them
        stats.rows_read = intake.rows_read
        if isinstance(pair, RowFailure):
            stats.rows_bad += 1
            continue
        item = assign_slots(pair, config.seed)
        if item is None:
            stats.rows_unlabelled += 1
            continue
        yield item
    stats.rows_read = intake.rows_read


def no_labelled_item(source: str, config: DataConfig) -> Stats | None:
    """The read counts of `source` when it holds no labelled item, else None (found at the
    first one): what build-data and sft check before a model loads or a file is written."""
    stats = Stats()
    items = read_items(source, config, stats)
    try:
        found = next(items, None)
    finally:
        items.close()
    return None if found is not None else stats


def no_items_reason(stats: Stats) -> str:
    return (f"no labelled pair ({count(stats.rows_read, 'row')} read, {stats.rows_unlabelled} "
            f"unlabelled, {stats.rows_bad} bad); give labelled pairs (chosen/rejected or a label "
            "column)")


def _chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    chunk: list[Item] = []
    for it in items:
        chunk.append(it)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def sample_all(items: Iterable[Item], source: RolloutSource, cache: RolloutCache,
               config: DataConfig, stats: Stats, progress=None) -> Iterator[tuple[Item, CachedRollouts]]:
    """Rollouts for every item: from the cache, or sampled in chunks and cached at once."""
    for chunk in _chunks(items, config.chunk_items):
        todo = [it for it in chunk if it.id not in cache]
        stats.items_from_cache += len(chunk) - len(todo)
        if todo:
            fresh = source.rollouts(todo)
            cache.add_many({it.id: r for it, r in zip(todo, fresh)})
        for it in chunk:
            yield it, cache.get(it.id)
        if progress:
            progress(len(chunk))


def outcome_of(item: Item, rollouts: CachedRollouts) -> Outcome:
    return Outcome(item, [parse_verdict(t, "pref") for t in rollouts.texts],
                   [extract_analysis(t) for t in rollouts.texts])


def criteria_field(criteria: str | None) -> dict[str, Any]:
    """An example's `criteria` (none without criteria: the data is as it was)."""
    return {"criteria": criteria} if criteria else {}


def pref_example(item: Item, suffix: str, criteria: str | None = None) -> dict[str, Any]:
    return {
        "id": f"{item.id}#pref", "task": "pref", "source_id": item.id, "label": item.label,
        "prompt": list(pref_messages(item.conversation, item.r1, item.r2, suffix,
                                     PromptStyle(criteria))),
        "conversation": list(item.conversation), "responses": [item.r1, item.r2],
        "suffix": suffix, "critique_rollouts": None, "prompt_format": PROMPT_FORMAT,
        **criteria_field(criteria),
    }


def refl_example(out: Outcome, suffix: str, seed: int,
                 criteria: str | None = None) -> dict[str, Any] | None:
    """One Refl example from a mixed-outcome item, or None when no usable pair exists."""
    item = out.item
    ok = out.correct
    good = [i for i, c in enumerate(ok) if c and out.analyses[i]]
    wrong = [i for i, (c, p) in enumerate(zip(ok, out.predictions))
             if not c and p is not None and out.analyses[i]]
    if not wrong:
        wrong = [i for i, c in enumerate(ok) if not c and out.analyses[i]]
    rng = random.Random(derive_seed(seed, item.id, "train-refl"))
    candidates = [(g, w) for g in good for w in wrong if out.analyses[g] != out.analyses[w]]
    if not candidates:
        return None
    g, w = rng.choice(candidates)
    if rng.random() < 0.5:
        c1, c2, label, order = out.analyses[g], out.analyses[w], 1, [g, w]
    else:
        c1, c2, label, order = out.analyses[w], out.analyses[g], 2, [w, g]
    return {
        "id": f"{item.id}#refl", "task": "refl", "source_id": item.id, "label": label,
        "prompt": list(refl_messages(item.conversation, item.r1, item.r2, c1, c2, suffix,
                                     PromptStyle(criteria))),
        "conversation": list(item.conversation), "responses": [item.r1, item.r2],
        "suffix": suffix, "critique_rollouts": order, "prompt_format": PROMPT_FORMAT,
        **criteria_field(criteria),
    }


def mix(pref: list[dict], refl: list[dict], ratio: str, seed: int, stats: Stats) -> list[dict]:
    """Pref and Refl at `ratio`, the scarcer kind kept whole; shuffled together."""
    a, b = parse_ratio(ratio)
    rng = random.Random(derive_seed(seed, "train-mix"))
    pref, refl = sorted(pref, key=lambda e: e["id"]), sorted(refl, key=lambda e: e["id"])
    if b == 0:
        keep_p, keep_r, stats.limited_by = pref, [], "ratio 1:0 (Pref only)"
    elif not refl:  # the ratio cannot be met at all: keep the Pref data rather than nothing
        keep_p, keep_r, stats.limited_by = pref, [], "no Refl built (Pref only, ratio not met)"
    elif len(pref) * b >= len(refl) * a:  # Refl is scarce: all Refl, Pref subsampled
        n = min(len(pref), math.floor(len(refl) * a / b))
        keep_p, keep_r = rng.sample(pref, n), refl
        stats.limited_by = "refl" if n < len(pref) else ""
    else:  # Pref is scarce: all Pref, Refl subsampled
        n = min(len(refl), math.floor(len(pref) * b / a))
        keep_p, keep_r = pref, rng.sample(refl, n)
        stats.limited_by = "pref"
    stats.pref_kept, stats.refl_kept = len(keep_p), len(keep_r)
    stats.pref_label_1 = sum(e["label"] == 1 for e in keep_p)
    stats.refl_label_1 = sum(e["label"] == 1 for e in keep_r)
    if keep_r:
        stats.final_ratio = f"{len(keep_p) / len(keep_r):.2f}:1"
    else:
        stats.final_ratio = f"{len(keep_p)}:0"
    examples = keep_p + keep_r
    rng.shuffle(examples)
    return examples


def build_examples(pairs: Iterable[tuple[Item, CachedRollouts]], suffix: str, config: DataConfig,
                   stats: Stats, criteria: str | None = None) -> list[dict[str, Any]]:
    """Pref and Refl examples from items and their rollouts (prompted with `criteria`), mixed
    at the ratio."""
    pref: list[dict] = []
    refl: list[dict] = []
    for item, rollouts in pairs:
        stats.items += 1
        if rollouts.error or not rollouts.texts:
            stats.items_unsampled += 1
            continue
        out = outcome_of(item, rollouts)
        n_ok = sum(out.correct)
        stats.rollouts += len(out.predictions)
        stats.rollouts_correct += n_ok
        stats.parse_failures += sum(p is None for p in out.predictions)
        if n_ok == len(out.predictions):
            stats.all_correct_dropped += 1
            continue
        pref.append(pref_example(item, suffix, criteria))
        if n_ok == 0:
            stats.all_incorrect += 1
            continue
        stats.mixed += 1
        ex = refl_example(out, suffix, config.seed, criteria)
        if ex is None:
            stats.refl_unusable += 1
        else:
            refl.append(ex)
    stats.pref_available, stats.refl_built = len(pref), len(refl)
    if stats.rollouts:
        stats.parse_failure_rate = round(stats.parse_failures / stats.rollouts, 4)
        stats.base_accuracy = round(stats.rollouts_correct / stats.rollouts, 4)
    stats.ratio_requested = config.ratio
    return mix(pref, refl, config.ratio, config.seed, stats)


BUILD_DATA = "rmjudge-train build-data"
OUTPUT_SUFFIXES = (".jsonl", ".json", ".ndjson", ".parquet")


def stats_path(output: str | Path) -> Path:
    """`train.jsonl` -> `train.stats.json`, beside the output."""
    p = Path(output)
    return p.with_name(p.name.rsplit(".", 1)[0] + ".stats.json")


def check_output_name(output: str | Path) -> None:
    """Refuse an output name that is neither JSONL nor Parquet (before anything is loaded)."""
    if Path(output).suffix not in OUTPUT_SUFFIXES:
        raise DataError(f"output {output}: use a .jsonl or .parquet file name")


def _read_stats(path: str | Path) -> dict | None:
    try:
        rec = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) and "rollout_settings" in rec else None


def is_own_stats(path: str) -> bool:
    """True when `path` holds build-data stats (what `stats_path` names)."""
    return _read_stats(path) is not None


def is_own_output(path: str) -> bool:
    """True when the stats file beside `path` records `path`'s current sha256 (build-data
    wrote it and nothing changed it since)."""
    from rmjudge.analysis.filter_record import file_sha256

    rec = _read_stats(stats_path(path))
    return bool(rec) and rec.get("output_sha256") == file_sha256(path)


def check_outputs(source: str, output: str | Path, cache_path: str | Path | None,
                  inputs: tuple[str | None, ...] = (), overwrite: bool = False) -> None:
    """Everything about build-data's outputs (training file, stats, rollout cache) that can be
    refused before a model loads (rmjudge.files.overwrite): a bad extension, an input (`source`
    and `inputs`: model, adapter) named as an output, two outputs that are one file, and an
    existing file build-data did not write (unless `overwrite`)."""
    from rmjudge.files import check_distinct, check_file_target, check_not_input, check_not_sidecar

    from rmjudge.training.cache import check_cache_file

    output = str(output)
    check_output_name(output)
    cache = str(cache_path) if cache_path is not None else default_cache_path(output)
    stats = str(stats_path(output))
    check_not_input([output, stats], source, inputs)  # the stats file is named after -o
    check_not_input([cache], source, inputs, flag="--cache")
    check_distinct({"-o": output, "the stats file": stats, "--cache": cache})
    check_file_target(output, BUILD_DATA, overwrite=overwrite, recognize=is_own_output,
                      mark=f"no stats file {Path(stats).name} beside it with its sha256")
    check_file_target(stats, BUILD_DATA, overwrite=overwrite, recognize=is_own_stats,
                      mark="not build-data stats", flag="-o (its stats file)")
    check_not_sidecar(cache, "--cache")
    check_cache_file(cache)
    check_writable(output, "-o")
    check_writable(cache, "--cache")


def check_writable(path: str, flag: str) -> None:
    """The folder of `path` is made (when missing) and can be written, else one DiskError
    (exit 4) naming the file and `flag`, before a model loads."""
    import errno
    import os

    from rmjudge.core.errors import DiskError
    from rmjudge.files import make_dir

    folder = os.path.dirname(os.path.abspath(path))
    try:
        make_dir(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(errno.EROFS if _read_only(folder) else errno.EACCES, "")
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise DiskError(f"cannot write {path}: {why} (the folder {folder}); nothing was "
                        f"written: choose a writable {flag}", path=path, reason=why) from None


def _read_only(folder: str) -> bool:
    import os

    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def default_cache_path(output: str | Path) -> str:
    return str(output) + ".rollouts.jsonl"


def write_examples(examples: list[dict[str, Any]], output: str | Path,
                   stats: dict[str, Any] | None = None, check=None) -> None:
    """JSONL or Parquet, by the output's extension, written through rmjudge.files's writer
    (`check` runs again just before the file is moved into place); with `stats`, the stats
    file, recording the output's sha256, is written next."""
    from rmjudge.analysis.filter_record import file_sha256
    from rmjudge.files import make_dir, write_file, write_produced

    check_output_name(output)
    out = Path(output)
    make_dir(str(out.parent))
    digest: list[str] = []

    def produce(tmp: str) -> None:
        if out.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(examples), tmp)
        else:
            with open(tmp, "wb") as f:
                for e in examples:
                    f.write(orjson.dumps(e) + b"\n")
        digest.append(file_sha256(tmp))

    write_produced(str(out), produce, check)
    if stats is not None:
        rec = {**stats, "written_by": BUILD_DATA, "output": out.name, "output_sha256": digest[0]}
        write_file(str(stats_path(out)), orjson.dumps(rec, option=orjson.OPT_INDENT_2))


def write_no_examples(output: str | Path, stats: dict[str, Any], check) -> None:
    """A build without an example: its stats file (naming no output) and no training file; an
    earlier build's file at `output` (which `check` accepts to replace) is removed, since it
    is not this build's data and its stats are replaced."""
    from rmjudge.files import remove_file, write_file

    check()
    remove_file(str(output))
    rec = {**stats, "written_by": BUILD_DATA, "output": None, "output_sha256": None}
    write_file(str(stats_path(output)), orjson.dumps(rec, option=orjson.OPT_INDENT_2),
               check=check)


def read_examples(path: str | Path) -> list[dict[str, Any]]:
    """Examples written by `write_examples` (JSONL or Parquet)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"training data not found: {path}; build it with `rmjudge-train build-data`")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(p).to_pylist()
    else:
        rows = [orjson.loads(line) for line in p.read_bytes().splitlines() if line.strip()]
    for i, r in enumerate(rows, 1):
        if r.get("task") not in ("pref", "refl") or r.get("label") not in (1, 2) or not r.get("prompt"):
            raise DataError(f"{path} row {i} is not a training example (needs task pref|refl, "
                            "label 1|2 and prompt); rebuild it with `rmjudge-train build-data`")
    return rows


def data_prompt_format(rows: list[dict[str, Any]], path: str | Path) -> int | None:
    """The prompt format of training examples (None: data built before formats were recorded,
    i.e. format 2 or older). Examples of two formats in one file are refused."""
    found = {r.get("prompt_format") for r in rows}
    if len(found) > 1:
        named = ", ".join(str(f) for f in sorted(found, key=str))
        raise DataError(f"{path} mixes examples of prompt formats {named}; rebuild it with "
                        "`rmjudge-train build-data`")
    return found.pop() if found else PROMPT_FORMAT


def check_prompt_format(rows: list[dict[str, Any]], path: str | Path) -> int:
    """The data's prompt format, which must be this rmjudge's: an adapter trained on other
    prompts would be refused at scoring anyway."""
    fmt = data_prompt_format(rows, path)
    if fmt != PROMPT_FORMAT:
        was = ("no prompt format (built before formats were recorded: format 2 or older)"
               if fmt is None else f"prompt format {fmt}")
        raise DataError(f"{path} holds prompts in {was}, but this rmjudge judges with prompt "
                        f"format {PROMPT_FORMAT}; rebuild it with `rmjudge-train build-data` "
                        "(with a new --cache: the rollouts were prompted in the old format)")
    return fmt


def build_data(source: str, output: str | Path, rollout_source: RolloutSource, config: DataConfig,
               cache_path: str | Path | None = None, progress=None,
               overwrite: bool = False) -> Stats:
    """The whole builder: read, sample (resumably), build, mix, write data and stats. The
    outputs are checked first (`check_outputs`), and again just before they are replaced. The
    temporaries a killed build-data left beside the output and its stats file
    (`.NAME.new-XXXXXXXX`) are removed first, unless a live process holds them."""
    from rmjudge.files import clean_stale_temps

    check_outputs(source, output, cache_path, overwrite=overwrite)
    for path in (output, stats_path(output)):
        clean_stale_temps(str(path))
    if cache_path is None:
        cache_path = default_cache_path(output)
    stats = Stats(rollout_settings=rollout_source.fingerprint())
    cache = RolloutCache(cache_path, rollout_source.fingerprint())
    pairs = sample_all(read_items(source, config, stats), rollout_source, cache, config, stats,
                       progress)
    examples = build_examples(pairs, rollout_source.suffix, config, stats,
                              getattr(rollout_source, "criteria", None))

    def check() -> None:
        check_outputs(source, output, cache_path, overwrite=overwrite)

    if not examples:
        hint = ("every item was answered correctly by all its rollouts"
                if stats.items and stats.all_correct_dropped == stats.items else
                f"{count(stats.items, 'item')}: {stats.all_correct_dropped} answered correctly "
                f"by all its rollouts, {stats.items_unsampled} could not be sampled"
                if stats.items else no_items_reason(stats))
        write_no_examples(output, stats.as_dict(), check)
        raise DataError(f"no training example was built: {hint}; no training file was written "
                        f"({output}), stats in {stats_path(output)}")
    write_examples(examples, output, stats.as_dict(), check)
    return stats
