"""Hugging Face datasets as inputs: Hub ids and `save_to_disk` folders (the `[hub]` extra).

Hub ids are written `hf://datasets/ORG/NAME[:CONFIG][@SPLIT]`, e.g.
`hf://datasets/org/prefs:en@test`. Without `:CONFIG` the dataset's only (or default) config is
used; without `@SPLIT` its only split, and a dataset with several splits is refused with their
names (a run never picks a split for you).

Where the rows come from, first that works:

- online: `datasets.load_dataset(id, config, streaming=True)`, which streams the files from the
  Hub (nothing is prepared on disk); datasets itself falls back to its cache when the Hub
  cannot be reached;
- the Hub cache (`$HF_HOME/hub`, what `hf download --repo-type dataset ID` or an earlier
  `load_dataset(ID)` left there), found with `huggingface_hub.snapshot_download(...,
  local_files_only=True)` and streamed from that local snapshot folder with the same
  config/split resolution as on the Hub (README `configs:` or the data-file names);
- datasets' own Arrow cache (`$HF_HOME/datasets/org___name`, left by an earlier non-streaming
  `load_dataset(ID)`), which `load_dataset` uses when offline.

With `HF_HUB_OFFLINE=1` (or `HF_DATASETS_OFFLINE=1`) the Hub is never contacted: the snapshot
is tried first, then datasets' cache. Note that a streaming run caches nothing: to work offline
later, download the dataset once (`hf download --repo-type dataset ORG/NAME`).

A `save_to_disk` folder is recognised by its `state.json` + `dataset_info.json` (a Dataset) or
its `dataset_dict.json` (a DatasetDict, whose split is chosen like a Hub split: `folder@test`,
or the split's own subfolder `folder/test`). It is read with `datasets.load_from_disk`, which
memory-maps the Arrow files.

Row numbers are 1-based positions in the split. A problem with the dataset as a whole (extra
not installed, unknown dataset, config or split, not cached while offline) is one `InputError`
naming the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator

from rmjudge.io.readers import InputError, RawRow

HUB_PREFIX = "hf://datasets/"
HUB_FORM = "hf://datasets/ORG/NAME[:CONFIG][@SPLIT]"
_HUB_RE = re.compile(r"hf://datasets/(?P<repo>[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?)"
                     r"(?::(?P<config>[^:@/]+))?(?:@(?P<split>[\w.-]+))?")
INSTALL_HINT = "pip install 'rmjudge[hub]'"


@dataclass(frozen=True)
class HubSource:
    repo: str
    config: str | None
    split: str | None


def is_hub_source(source: str) -> bool:
    return source.startswith("hf://")


def parse_hub_source(source: str) -> HubSource:
    m = _HUB_RE.fullmatch(source)
    if not m:
        raise InputError(f"cannot read the dataset id {source!r}: write {HUB_FORM}, "
                         "e.g. hf://datasets/org/prefs@train or hf://datasets/org/prefs:en@test")
    return HubSource(m["repo"], m["config"], m["split"])


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

_resolved: dict[str, Any] = {}  # source -> IterableDataset; count_rows and read_rows share it


def check_hub_source(source: str) -> None:
    """Parse the id and find the dataset (so a bad id fails before any work starts)."""
    _resolve_hub(source)


def _resolve_hub(source: str):
    if source in _resolved:
        return _resolved[source]
    src = parse_hub_source(source)
    datasets = _datasets(source)
    offline = _offline(datasets)
    attempts = [_from_snapshot, _from_hub] if offline else [_from_hub, _from_snapshot]
    problems: list[BaseException] = []
    for attempt in attempts:
        try:
            dsets = attempt(datasets, src)
        except InputError:
            raise
        except Exception as exc:  # datasets/huggingface_hub raise many kinds; all mean "not here"
            problems.append(exc)
            if _is_config_problem(exc):
                raise InputError(_config_message(source, src, exc)) from None
            continue
        ds = _pick_split(source, src, dsets)
        _resolved[source] = ds
        return ds
    raise InputError(_not_found_message(source, src, offline, problems)) from None


def _load(datasets, path: str, config: str | None):
    """Streamed where the dataset allows; else prepared on disk and memory-mapped."""
    try:
        return datasets.load_dataset(path, config, streaming=True)
    except NotImplementedError:  # a format that cannot be streamed
        return datasets.load_dataset(path, config)


def _from_hub(datasets, src: HubSource):
    return _load(datasets, src.repo, src.config)


def _from_snapshot(datasets, src: HubSource):
    from huggingface_hub import snapshot_download

    folder = snapshot_download(src.repo, repo_type="dataset", local_files_only=True)
    return _load(datasets, folder, src.config)


def _is_config_problem(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, ValueError) and ("Config name is missing" in text
                                            or "BuilderConfig" in text)


def _config_message(source: str, src: HubSource, exc: BaseException) -> str:
    m = re.search(r"\[([^\]]*)\]", str(exc))
    names = [n.strip(" '\"") for n in m[1].split(",")] if m else []
    example = f"hf://datasets/{src.repo}:{names[0] if names else 'CONFIG'}" + (
        f"@{src.split}" if src.split else "")
    listed = f"its configs: {', '.join(names)}" if names else "see the dataset card for its configs"
    if src.config:
        return f"{source}: the dataset has no config {src.config!r}; {listed}; e.g. {example}"
    return f"{source}: the dataset has several configs; name one ({listed}): {example}"


def _not_found_message(source: str, src: HubSource, offline: bool,
                       problems: list[BaseException]) -> str:
    kinds = {type(p).__name__ for p in problems}
    if "DatasetNotFoundError" in kinds and not offline:
        return (f"{source}: no dataset {src.repo} on the Hugging Face Hub, or it is private or "
                "gated (log in with `hf auth login`)")
    if offline:
        from huggingface_hub import constants

        return (f"{source}: {src.repo} is not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}) and offline mode (HF_HUB_OFFLINE=1) forbids "
                f"downloading it; download it once with `hf download --repo-type dataset "
                f"{src.repo}` (same HF_HOME), or unset HF_HUB_OFFLINE")
    detail = "; ".join(dict.fromkeys(_first_line(p) for p in problems))
    return (f"{source}: cannot load {src.repo} from the Hugging Face Hub nor from the local "
            f"cache ({detail}); check the id and the network, or download it where there is "
            "network and set HF_HUB_OFFLINE=1")


def _pick_split(source: str, src: HubSource, dsets) -> Any:
    names = list(dsets.keys())
    return dsets[_choose_split(source, names, src.split,
                               lambda s: f"hf://datasets/{src.repo}"
                               + (f":{src.config}" if src.config else "") + f"@{s}")]


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
    ds = _resolve_hub(source)
    yield from _rows(source, ds)


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
    ds = _resolve_hub(source)
    splits = getattr(ds.info, "splits", None)
    split = getattr(ds, "split", None)
    if splits and split is not None and str(split) in splits:
        n = splits[str(split)].num_examples
        return int(n) if n else None
    return None
