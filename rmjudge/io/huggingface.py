"""Hugging Face datasets as inputs: Hub ids and `save_to_disk` folders (the `[hub]` extra).

Hub ids follow huggingface_hub's own URIs for the repository and its revision, with the config
and split in a query (or in `--config` / `--split`):

    hf://datasets/ORG/NAME[@REVISION][?config=CONFIG&split=SPLIT]

e.g. `hf://datasets/org/prefs@v1.0?config=en&split=test`. REVISION is a branch, a tag or a full
commit sha (a `/` in a branch name may be written `%2F`); without it the default branch is read.
Without a config the dataset's only (or default) config is used; without a split its only
split, and a dataset with several splits is refused with their names (a run never picks a split
for you). The commit the revision resolves to is recorded in the run (`resolved_revision`), so
a resume is refused when the revision has moved since, and the dataset card names it.

The old spelling `hf://datasets/ORG/NAME[:CONFIG][@SPLIT]` is still read for one release, with
a one-line warning on stderr that shows the new one. `@X` alone is ambiguous between the two:
X is the revision when it is a full commit sha or a branch or tag of the dataset (in the local
cache, or on the Hub when online); otherwise it is read as the old form's split, when the
dataset has a split X; otherwise the id is refused. With `:CONFIG` the id is always the old form.

Where the rows come from, first that works:

- online: the revision is resolved to its commit (`HfApi.dataset_info`), then
  `datasets.load_dataset(id, config, revision=COMMIT, streaming=True)` streams the files of that
  commit from the Hub (nothing is prepared on disk);
- the Hub cache (`$HF_HOME/hub`, what `hf download --repo-type dataset [--revision REV] ID` or
  an earlier `load_dataset(ID)` left there), found with `huggingface_hub.snapshot_download(...,
  revision=REV, local_files_only=True)` (the snapshot folder is named by its commit) and
  streamed from that local folder with the same config/split resolution as on the Hub (README
  `configs:` or the data-file names);
- datasets' own Arrow cache (`$HF_HOME/datasets/org___name`, left by an earlier non-streaming
  `load_dataset(ID)`), which `load_dataset` uses when offline; it holds no revision, so it is
  used only when none is asked for, and the run records no commit.

With `HF_HUB_OFFLINE=1` (or `HF_DATASETS_OFFLINE=1`) the Hub is never contacted: the snapshot
is tried first, then datasets' cache. Note that a streaming run caches nothing: to work offline
later, download the dataset once (`hf download --repo-type dataset ORG/NAME`).

A `save_to_disk` folder is recognised by its `state.json` + `dataset_info.json` (a Dataset) or
its `dataset_dict.json` (a DatasetDict, whose split is chosen like a Hub split: `folder@test`,
or the split's own subfolder `folder/test`). It is read with `datasets.load_from_disk`, which
memory-maps the Arrow files.

Row numbers are 1-based positions in the split. A problem with the dataset as a whole (extra
not installed, unknown dataset, revision, config or split, not cached while offline) is one
`InputError` naming the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Iterator
from urllib.parse import parse_qsl, quote, unquote

from rmjudge.core.extras import install_hint
from rmjudge.io.rows import InputError, RawRow

HUB_PREFIX = "hf://datasets/"
HUB_FORM = "hf://datasets/ORG/NAME[@REVISION][?config=CONFIG&split=SPLIT]"
_HUB_RE = re.compile(r"hf://datasets/(?P<repo>[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?)"
                     r"(?::(?P<config>[^:@/?&=]+))?(?:@(?P<at>[^?@]+))?(?:\?(?P<query>.*))?",
                     re.DOTALL)
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_QUERY_KEYS = ("config", "split")
INSTALL_HINT = install_hint("hub")


@dataclass(frozen=True)
class HubSource:
    """A parsed Hub id. `at` is a bare `@X` of an id without `:CONFIG` or a query: a revision
    or the old form's split, decided when the dataset is found (`_decide_at`). `legacy`: the id
    is (or was decided to be) in the old `:CONFIG@SPLIT` form."""

    repo: str
    config: str | None
    split: str | None
    revision: str | None = None
    at: str | None = None
    legacy: bool = False


def is_hub_source(source: str) -> bool:
    return source.startswith("hf://")


def parse_hub_source(source: str) -> HubSource:
    """The id's parts, from its text alone (a bare `@X` stays undecided in `at`)."""
    m = _HUB_RE.fullmatch(source)
    if not m:
        raise InputError(f"cannot read the dataset id {source!r}: write {HUB_FORM}, "
                         "e.g. hf://datasets/org/prefs, hf://datasets/org/prefs@v1.0 or "
                         "'hf://datasets/org/prefs?config=en&split=test'")
    at = unquote(m["at"]) if m["at"] else None
    if m["query"] is None:
        if m["config"] is not None:  # the old form: `@` is the split
            return HubSource(m["repo"], m["config"], at, legacy=True)
        return HubSource(m["repo"], None, None, at=at)
    query = _parse_query(source, m["query"])
    if m["config"] is not None:
        raise InputError(f"{source}: give the config in the query "
                         f"({hub_uri(m['repo'], at, m['config'], query.get('split'))})")
    return HubSource(m["repo"], query.get("config"), query.get("split"), revision=at)


def _parse_query(source: str, text: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        pairs = [("", "")]
    out: dict[str, str] = {}
    for key, value in pairs:
        if key not in _QUERY_KEYS or not value or key in out:
            raise InputError(f"{source}: the query after `?` takes config=NAME and split=NAME, "
                             "each once, joined by `&` (quote the id in a shell), e.g. "
                             "'hf://datasets/org/prefs?config=en&split=test'")
        out[key] = value
    return out


def hub_uri(repo: str, revision: str | None, config: str | None, split: str | None) -> str:
    """The id in the current form: hf://datasets/REPO[@REVISION][?config=..&split=..]."""
    text = HUB_PREFIX + repo
    if revision:
        text += "@" + quote(revision, safe="-_.~")
    query = "&".join(f"{k}={quote(v, safe='-_.~')}"
                     for k, v in (("config", config), ("split", split)) if v)
    return text + ("?" + query if query else "")


@dataclass(frozen=True)
class DatasetChoice:
    """`--config` / `--split`: which config and split of a Hugging Face dataset input to read
    (every command that reads an input dataset has both, generated from these fields)."""

    hub_config: str | None = field(default=None, metadata={
        "option": "--config", "metavar": "NAME",
        "help": "The config of a Hugging Face dataset input (hf://datasets/ORG/NAME)."})
    hub_split: str | None = field(default=None, metadata={
        "option": "--split", "metavar": "NAME",
        "help": "The split of a Hugging Face dataset input (hf://datasets/ORG/NAME, or a "
                "save_to_disk DatasetDict folder)."})

    def apply(self, source: str) -> str:
        """`source` with these applied (`with_config_split`)."""
        return with_config_split(source, self.hub_config, self.hub_split)


def with_config_split(source: str, config: str | None, split: str | None) -> str:
    """`source` with `--config` / `--split` applied: a Hub id in the current form, or for a
    saved DatasetDict folder `folder@SPLIT`. With either option a bare `@X` is the revision."""
    if config is None and split is None:
        return source
    if is_hub_source(source):
        src = parse_hub_source(source)
        revision = src.revision if src.at is None else src.at

        def merged(name: str, given: str | None, option: str | None) -> str | None:
            if given is not None and option is not None and given != option:
                raise InputError(f"{source} names the {name} {given!r} but --{name} says "
                                 f"{option!r}; give it once")
            return option if option is not None else given

        return hub_uri(src.repo, revision, merged("config", src.config, config),
                       merged("split", src.split, split))
    if config is None and os.path.isfile(os.path.join(source, "dataset_dict.json")):
        return f"{source.rstrip(os.sep)}@{split}"
    raise InputError("--config and --split choose the config and split of a Hugging Face dataset "
                     f"(hf://datasets/ORG/NAME; --split also a save_to_disk DatasetDict "
                     f"folder), not of {source}")


def output_parts(source: str) -> list[str]:
    """The parts of the default output name of a Hub id: repo, config, split, revision (a bare
    `@X` in the split's place, so the old form's names are kept)."""
    src = parse_hub_source(source)
    rev = src.revision or src.at
    return [p for p in (src.repo.replace("/", "_"), src.config, src.split,
                        rev.replace("/", "_") if rev else None) if p]


def _datasets(source: str):
    if importlib.util.find_spec("datasets") is None:
        raise InputError(f"reading {source} needs the Hugging Face datasets library: "
                         f"{INSTALL_HINT}")
    import datasets

    return datasets


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _offline(datasets) -> bool:
    return bool(datasets.config.HF_HUB_OFFLINE)


# -- Hub ids --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Resolved:
    dataset: Any  # the split: an IterableDataset (or a Dataset, for a format that cannot stream)
    repo: str
    config: str | None  # as asked for
    split: str  # the split read
    revision: str | None  # as asked for; None: the default branch
    commit: str | None  # the commit read; None when datasets' Arrow cache was read


_resolved: dict[str, _Resolved] = {}  # source -> its split; count_rows and read_rows share it
_warned: set[str] = set()


def check_hub_source(source: str) -> None:
    """Parse the id and find the dataset (so a bad id fails before any work starts)."""
    _resolve_hub(source)


def resolved_revision(source: str) -> dict | None:
    """What a Hub id resolved to (found if need be): `revision` (as asked for; None: the
    default branch), `commit` (None when datasets' Arrow cache was read) and `pinned` (the id
    of that commit, which reads the same rows however the revision moves). None for any other
    input."""
    if not is_hub_source(source):
        return None
    res = _resolve_hub(source)
    return {"revision": res.revision, "commit": res.commit,
            "pinned": hub_uri(res.repo, res.commit, res.config, res.split) if res.commit
            else None}


def _resolve_hub(source: str) -> _Resolved:
    if source in _resolved:
        return _resolved[source]
    src = parse_hub_source(source)
    datasets = _datasets(source)
    offline = _offline(datasets)
    if src.at is not None:
        src = _decide_at(src, offline)
    attempts = [_from_snapshot, _from_hub] if offline else [_from_hub, _from_snapshot]
    problems: list[BaseException] = []
    for attempt in attempts:
        try:
            dsets, commit = attempt(datasets, src, offline)
        except InputError:
            raise
        except Exception as exc:  # datasets/huggingface_hub raise many kinds; all mean "not here"
            problems.append(exc)
            if _is_config_problem(exc):
                raise InputError(_config_message(source, src, exc)) from None
            continue
        split = _pick_split(source, src, dsets)
        res = _Resolved(dsets[split], src.repo, src.config, split, src.revision, commit)
        if src.legacy:
            _warn_old_form(source, src)
        _resolved[source] = res
        return res
    raise InputError(_not_found_message(source, src, offline, problems)) from None


def _decide_at(src: HubSource, offline: bool) -> HubSource:
    """A bare `@X`: the revision when X is a full commit sha or a branch or tag of the dataset;
    else the old form's split (`at` is kept, so a missing split names both readings)."""
    x = src.at or ""
    if _COMMIT_RE.fullmatch(x) or _is_ref(src.repo, x, offline):
        return replace(src, revision=x, at=None)
    return replace(src, split=x, legacy=True)


def _is_ref(repo: str, name: str, offline: bool) -> bool:
    """A branch or tag of the dataset: in the Hub cache (`refs/NAME`, left by a download of
    that revision), or, online, on the Hub."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    folder = os.path.join(constants.HF_HUB_CACHE, repo_folder_name(repo_id=repo,
                                                                    repo_type="dataset"))
    if ".." not in name.split("/") and os.path.isfile(os.path.join(folder, "refs", name)):
        return True
    if offline:
        return False
    try:
        from huggingface_hub import HfApi

        refs = HfApi().list_repo_refs(repo, repo_type="dataset")
    except Exception:  # no network, unknown repo: the dataset's own lookup reports it
        return False
    return name in {r.name for r in refs.branches} | {r.name for r in refs.tags}


def _warn_old_form(source: str, src: HubSource) -> None:
    """One line on stderr, once per id, showing the new spelling."""
    if source in _warned:
        return
    _warned.add(source)
    options = " ".join(f"--{k} {v}" for k, v in (("config", src.config), ("split", src.split))
                       if v)
    sys.stderr.write(f"rmjudge: warning: {source} is the old form of a Hub dataset id, read "
                     f"until the next release (`@` is now a revision, as in huggingface_hub); "
                     f"write '{hub_uri(src.repo, None, src.config, src.split)}' or "
                     f"{HUB_PREFIX}{src.repo} {options}\n")


def _load(datasets, path: str, config: str | None, revision: str | None = None):
    """Streamed where the dataset allows; else prepared on disk and memory-mapped."""
    try:
        return datasets.load_dataset(path, config, revision=revision, streaming=True)
    except NotImplementedError:  # a format that cannot be streamed
        return datasets.load_dataset(path, config, revision=revision)


def _from_hub(datasets, src: HubSource, offline: bool):
    """Online: the revision's commit from the Hub, then that commit's files. Offline: datasets'
    Arrow cache, which holds no revision (so only when none is asked for)."""
    if offline:
        if src.revision is not None:
            raise LookupError(f"datasets' cache cannot tell revision {src.revision}")
        return _load(datasets, src.repo, src.config), None
    from huggingface_hub import HfApi

    commit = HfApi().dataset_info(src.repo, revision=src.revision).sha
    return _load(datasets, src.repo, src.config, commit), commit


def _from_snapshot(datasets, src: HubSource, offline: bool):
    from huggingface_hub import snapshot_download

    folder = snapshot_download(src.repo, repo_type="dataset", revision=src.revision,
                               local_files_only=True)
    return _load(datasets, folder, src.config), os.path.basename(os.path.normpath(folder))


def _is_config_problem(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, ValueError) and ("Config name is missing" in text
                                            or "BuilderConfig" in text)


def _config_message(source: str, src: HubSource, exc: BaseException) -> str:
    m = re.search(r"\[([^\]]*)\]", str(exc))
    names = [n.strip(" '\"") for n in m[1].split(",")] if m else []
    name = names[0] if names else "CONFIG"
    example = f"--config {name} or '{hub_uri(src.repo, src.revision, name, src.split)}'"
    listed = f"its configs: {', '.join(names)}" if names else "see the dataset card for its configs"
    if src.config:
        return f"{source}: the dataset has no config {src.config!r}; {listed}; e.g. {example}"
    return f"{source}: the dataset has several configs; name one ({listed}): {example}"


def _not_found_message(source: str, src: HubSource, offline: bool,
                       problems: list[BaseException]) -> str:
    kinds = {type(p).__name__ for p in problems}
    rev = src.revision
    if "RevisionNotFoundError" in kinds and not offline:
        return (f"{source}: {src.repo} has no revision {rev!r} on the Hugging Face Hub; give a "
                "branch, a tag or a full commit sha")
    if kinds & {"DatasetNotFoundError", "RepositoryNotFoundError", "GatedRepoError"} \
            and not offline:
        return (f"{source}: no dataset {src.repo} on the Hugging Face Hub, or it is private or "
                "gated (log in with `hf auth login`)")
    at = f" at revision {rev}" if rev else ""
    download = "hf download --repo-type dataset " + (f"--revision {rev} " if rev else "") \
        + src.repo
    if offline:
        from huggingface_hub import constants

        return (f"{source}: {src.repo}{at} is not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}) and offline mode (HF_HUB_OFFLINE=1) forbids "
                f"downloading it; download it once with `{download}` (same HF_HOME), or unset "
                "HF_HUB_OFFLINE")
    detail = "; ".join(dict.fromkeys(_first_line(p) for p in problems))
    return (f"{source}: cannot load {src.repo}{at} from the Hugging Face Hub nor from the local "
            f"cache ({detail}); check the id and the network, or download it where there is "
            "network and set HF_HUB_OFFLINE=1")


def _pick_split(source: str, src: HubSource, dsets) -> str:
    names = list(dsets.keys())
    if src.at is not None and src.split not in names:
        raise InputError(f"{source}: {src.at!r} is neither a branch, tag or full commit sha of "
                         f"{src.repo} (in the local cache or on the Hub) nor one of its splits "
                         f"({', '.join(names) or 'none'})")
    return _choose_split(source, names, src.split,
                         lambda s: f"--split {s} or "
                         f"'{hub_uri(src.repo, src.revision, src.config, s)}'")


def _choose_split(source: str, names: list[str], split: str | None, form) -> str:
    if split is not None:
        if split not in names:
            raise InputError(f"{source}: no split {split!r}; splits: {', '.join(names) or 'none'}")
        return split
    if len(names) == 1:
        return names[0]
    if not names:
        raise InputError(f"{source}: the dataset has no splits")
    raise InputError(f"{source} has several splits ({', '.join(names)}); choose one: "
                     f"{form(names[0])}")


def read_hub(source: str) -> Iterator[RawRow]:
    yield from _rows(source, _resolve_hub(source).dataset)


def _rows(source: str, ds) -> Iterator[RawRow]:
    n = 0
    it = iter(ds)
    while True:
        try:
            row = next(it)
        except StopIteration:
            return
        except Exception as exc:  # a network drop, a damaged file in the middle of the split
            raise InputError(f"reading {source} failed after row {n} ({_first_line(exc)}); "
                             "rerun the same command to resume") from None
        n += 1
        yield RawRow(n, dict(row))


# -- save_to_disk folders -------------------------------------------------------------------

def is_saved_dataset(folder: str) -> bool:
    """A folder written by Dataset.save_to_disk or DatasetDict.save_to_disk."""
    return os.path.isfile(os.path.join(folder, "dataset_dict.json")) or (
        os.path.isfile(os.path.join(folder, "state.json"))
        and os.path.isfile(os.path.join(folder, "dataset_info.json")))


def split_disk_source(source: str) -> tuple[str, str] | None:
    """'folder@split' -> (folder, split) when folder is a saved DatasetDict; else None."""
    folder, at, split = source.rpartition("@")
    if at and split and os.path.isfile(os.path.join(folder, "dataset_dict.json")):
        return folder, split
    return None


def _dict_splits(folder: str) -> list[str]:
    path = os.path.join(folder, "dataset_dict.json")
    try:
        with open(path, "rb") as f:
            splits = json.load(f)["splits"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path} is not a readable DatasetDict index ({_first_line(exc)}); "
                         "save the dataset again with save_to_disk") from None
    return [str(s) for s in splits]


def disk_split_folder(source: str) -> str:
    """The folder of the one Dataset that `source` names (a DatasetDict's split resolved)."""
    parts = split_disk_source(source)
    folder, split = parts if parts else (source, None)
    if not os.path.isfile(os.path.join(folder, "dataset_dict.json")):
        return folder
    name = _choose_split(source, _dict_splits(folder), split,
                         lambda s: f"{folder.rstrip(os.sep)}@{s}")
    return os.path.join(folder, name)


def check_disk_source(source: str) -> None:
    _datasets(source)
    disk_split_folder(source)


def _load_disk(source: str):
    datasets = _datasets(source)
    folder = disk_split_folder(source)
    try:
        return datasets.load_from_disk(folder)
    except Exception as exc:  # damaged or foreign files; datasets raises several kinds
        raise InputError(f"cannot load {folder} with datasets.load_from_disk "
                         f"({_first_line(exc)}); save the dataset again with "
                         "save_to_disk") from None


def read_disk(source: str) -> Iterator[RawRow]:
    yield from _rows(source, _load_disk(source))


# -- counts ---------------------------------------------------------------------------------

def count_rows(source: str, fmt: str) -> int | None:
    """Rows of the split, when known without reading it (None otherwise)."""
    if fmt == "hf-disk":
        return len(_load_disk(source))
    ds = _resolve_hub(source).dataset
    splits = getattr(ds.info, "splits", None)
    split = getattr(ds, "split", None)
    if splits and split is not None and str(split) in splits:
        n = splits[str(split)].num_examples
        return int(n) if n else None
    return None
