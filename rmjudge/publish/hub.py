"""Upload a dataset written by `rmjudge filter` to the Hugging Face Hub, with its card.

`prepare_folder(export, repo_id, folder)` writes exactly what a push uploads:

    folder/README.md               the dataset card (card.py), from the export's filter record
    folder/data/train.parquet      the export, byte for byte (data/train.jsonl for JSONL)

`push(export, repo_id)` creates the dataset repository when missing (`HfApi.create_repo`,
`exist_ok`, private with `private=True`) and uploads that folder in one commit
(`HfApi.upload_folder`), replacing the card and everything under `data/` that an earlier
push left. It needs the `[hub]` extra (`huggingface_hub`) and a token with write access
(`HF_TOKEN`, or `hf auth login`); `HF_ENDPOINT` points it at another Hub.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass

from rmjudge.core.errors import UserError
from rmjudge.core.extras import install_hint
from rmjudge.core.settings import setting
from rmjudge.publish.card import hub_repo, render_card, sources
from rmjudge.analysis.filter_record import read_record
from rmjudge.files import make_dir, place_copy, remove_file, scratch, write_file

INSTALL_HINT = install_hint("hub")
FOLDER_FILES = {"README.md", "data", "data/train.parquet", "data/train.jsonl"}
_REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


class HubError(UserError):
    """Publishing cannot go ahead as asked; the message names the fix."""


class HubExtraError(HubError):
    """huggingface_hub is not installed."""


class HubTokenError(HubError):
    """No Hugging Face token to push with."""


@dataclass(frozen=True)
class UploadSettings:
    """How a dataset is uploaded: the options of `rmjudge push` and of `rmjudge filter
    --push-to-hub`."""

    private: bool = setting(False, "Create the dataset repository private.", flag="--private")
    license: str | None = setting(None, "The card's license (default: the source dataset's, when "
                                  "its card is in the local Hugging Face cache; else none is "
                                  "claimed).", dest="license_", metavar="ID")
    dry_run: str | None = setting(None, "Write the folder that would be uploaded (README.md, "
                                  "data/train.*) to DIR and upload nothing.", metavar="DIR")


@dataclass
class Prepared:
    folder: str
    data_path: str  # inside the repository
    readme: str
    rows: int
    license: str | None


def require_hub(what: str = "publishing a dataset"):
    if importlib.util.find_spec("huggingface_hub") is None:
        raise HubExtraError(f"{what} needs the Hugging Face Hub client: {INSTALL_HINT}")
    import huggingface_hub

    return huggingface_hub


def check_repo_id(repo_id: str) -> None:
    if not _REPO_RE.fullmatch(repo_id) or len(repo_id) > 96 or ".." in repo_id \
            or repo_id.endswith((".", "-")):
        raise HubError(f"{repo_id!r} is not a dataset repository id: write ORG/NAME (letters, "
                       "digits, '-', '_', '.'), e.g. my-org/helpsteer3-dpo")


def check_upload(repo_id: str | None, up: UploadSettings) -> None:
    """`filter --push-to-hub`, before any work: the upload options only with a repository,
    and then a valid id, the hub extra and (unless a dry run) a token; HubError otherwise."""
    if not repo_id:
        if up.private or up.license or up.dry_run:
            raise HubError("--private, --license and --dry-run go with --push-to-hub ORG/NAME")
        return
    require_hub()
    check_repo_id(repo_id)
    if not up.dry_run:
        resolve_token()


def source_license(record: dict) -> str | None:
    """The license of the source dataset, read from its card in the local Hugging Face cache
    (only for an `hf://datasets/...` input whose card is there; nothing is downloaded)."""
    hf = require_hub()
    ident = record.get("input") or {}
    for s in sources(record):
        repo = hub_repo(s)
        if not repo:
            continue
        # the card of the commit that was judged, when the run recorded it
        commit = ident.get("commit") if hub_repo(ident.get("source") or "") == repo else None
        try:
            path = hf.try_to_load_from_cache(repo, "README.md", repo_type="dataset",
                                             revision=commit)
            if isinstance(path, str):
                lic = hf.DatasetCard.load(path).data.license
                if isinstance(lic, list):
                    lic = lic[0] if len(lic) == 1 else None
                if lic:
                    return str(lic)
        except Exception:  # an unreadable cached card only means "license not known"
            continue
    return None


def _check_folder(folder: str) -> None:
    if os.path.isfile(folder):
        raise HubError(f"{folder} is a file; give a folder for the upload")
    if not os.path.isdir(folder):
        return
    present = set()
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            present.add(os.path.normpath(os.path.join(rel, name)))
    extra = sorted(present - FOLDER_FILES)
    if extra:
        raise HubError(f"{folder} holds other files ({', '.join(extra[:3])}"
                       f"{', ...' if len(extra) > 3 else ''}); give an empty or new folder")
    # an earlier dry run's folder is refreshed in place; a README.md or data/ that rmjudge did
    # not write is never replaced
    ours = sorted(present - {"data"})
    if ours and not _is_our_card(os.path.join(folder, "README.md")):
        raise HubError(f"{folder} holds {', '.join(ours)} not written by rmjudge (no rmjudge "
                       "dataset card); give an empty or new folder")


def _is_our_card(path: str) -> bool:
    """Whether `path` is a dataset card rmjudge wrote (front matter tagged rmjudge)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(65536)
    except (OSError, UnicodeDecodeError):
        return False
    if not head.startswith("---\n") or "\n---\n" not in head[4:]:
        return False
    front = head[4:].split("\n---\n", 1)[0]
    return re.search(r"^- rmjudge$", front, re.M) is not None


def prepare_folder(export: str, repo_id: str, folder: str,
                   license: str | None = None) -> Prepared:
    """Write the folder a push of `export` to `repo_id` uploads (see the module docstring)."""
    require_hub()
    check_repo_id(repo_id)
    record = read_record(export)
    rows = int(record["counts"]["rows"])
    if rows == 0:
        raise HubError(f"{export} has no rows (no pair passed the filter), so there is nothing "
                       "to publish: loosen the filter (--min-confidence, --allow-inconsistent, "
                       "--relabel) and write it again")
    _check_folder(folder)
    ext = "parquet" if record.get("file_format") == "parquet" else "jsonl"
    data_path = f"data/train.{ext}"
    license = license or source_license(record)
    readme = render_card(record, data_path, repo_id, license)
    make_dir(os.path.join(folder, "data"))
    for stale in ("data/train.parquet", "data/train.jsonl"):
        if stale != data_path:
            remove_file(os.path.join(folder, stale))
    place_copy(export, os.path.join(folder, data_path))
    write_file(os.path.join(folder, "README.md"), readme.encode())
    return Prepared(folder, data_path, readme, rows, license)


def resolve_token(token: str | None = None) -> str:
    """The token to push with (`token`, else HF_TOKEN or the `hf auth login` one)."""
    hf = require_hub()
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise HubError("HF_HUB_OFFLINE is set, so nothing can be uploaded: unset it to push, "
                       "or write the upload folder with --dry-run DIR")
    token = token or hf.get_token()
    if not token:
        raise HubTokenError("no Hugging Face token to push with: run `hf auth login` or set "
                            "HF_TOKEN to a token with write access")
    return token


def _is_transfer_error(exc: BaseException) -> bool:
    """Errors of the Hub client or its HTTP stack (refused, unauthorized, network down...)."""
    roots = {"huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2", "requests",
             "urllib3"}
    return isinstance(exc, OSError) or any(
        (t.__module__ or "").split(".")[0] in roots for t in type(exc).__mro__)


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def push(export: str, repo_id: str, *, private: bool = False, license: str | None = None,
         api=None, token: str | None = None) -> str:
    """Upload `export` with its card to the dataset repository `repo_id`; returns its URL."""
    hf = require_hub()
    check_repo_id(repo_id)
    read_record(export)  # fail on a missing or stale record before asking for a token
    token = resolve_token(token)
    api = api or hf.HfApi()
    with scratch(prefix=".rmjudge-push-", beside=export) as work:
        prep = prepare_folder(export, repo_id, work, license)
        try:
            url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True,
                                  token=token)
            api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=work,
                              token=token, delete_patterns=["data/*"],
                              commit_message=f"Upload {prep.rows} rows filtered by rmjudge")
        except Exception as exc:
            if not _is_transfer_error(exc):
                raise
            raise HubError(f"cannot push {export} to {repo_id}: {_first_line(exc)} (check the "
                           "repository id, the token's write access and the network)") from None
    return str(getattr(url, "url", None) or url)
