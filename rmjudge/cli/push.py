"""`rmjudge push`: upload a dataset written by `rmjudge filter` to the Hugging Face Hub."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import click

from rmjudge.cli.options import settings_from, settings_options
from rmjudge.core.settings import setting
from rmjudge.publish.hub import UploadSettings


def upload_options(after: str | None = None) -> Callable[[Callable], Callable]:
    """--private, --license and --dry-run (`UploadSettings`): the options of an upload, for
    `push` and for `filter --push-to-hub` (`after`: the option they go with, named in their
    help)."""
    if after is None:
        return settings_options(UploadSettings)
    return settings_options(UploadSettings,
                            helps=lambda text: f"{after}: {text[0].lower()}{text[1:]}")


def publish(export: str, repo_id: str, *, private: bool = False, license_: str | None = None,
            dry_run: str | None = None, after_filter: bool = False) -> None:
    """Write the upload folder (`dry_run`) or push; shared by `push` and `filter --push-to-hub`."""
    from rmjudge.publish.hub import HubError, prepare_folder, push

    if dry_run:
        prep = prepare_folder(export, repo_id, dry_run, license_)
        from rmjudge.cli.layout import echo

        echo(f"dry run: the upload to {repo_id} is in {prep.folder}: README.md, "
             f"{prep.data_path} ({prep.rows} rows); license: "
             f"{prep.license or 'not known (give --license ID)'}; nothing was uploaded")
        return
    try:
        url = push(export, repo_id, private=private, license=license_)
    except HubError as exc:
        if after_filter:
            exc.args = (f"{exc} (the dataset itself is written: push it with "
                        f"`rmjudge push {export} {repo_id}`)",)
        raise
    from rmjudge.cli.layout import echo

    echo(f"pushed {export} to {url}" + (" (private)" if private else ""))


@dataclass(frozen=True)
class PushCall:
    """What `push` uploads, and where to."""

    export: str = setting(argument=True, metavar="EXPORT")
    repo_id: str = setting(argument=True, metavar="ORG/NAME")


@click.command("push")
@settings_options(PushCall)
@upload_options()
def command(**kw) -> None:
    """Upload EXPORT, a dataset written by `rmjudge filter`, to the Hugging Face dataset
    repository ORG/NAME as its train split, with a generated dataset card (source, judge model
    and sha256, settings, counts, eval figures). Needs pip install '.[hub]' (in the clone) and a token
    (HF_TOKEN or `hf auth login`)."""
    call, up = settings_from(PushCall, kw), settings_from(UploadSettings, kw)
    publish(call.export, call.repo_id, private=up.private, license_=up.license,
            dry_run=up.dry_run)
