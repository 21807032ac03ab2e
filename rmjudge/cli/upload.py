"""Uploads to the Hugging Face Hub as `rmjudge push` and `rmjudge filter --push-to-hub` do them:
their options (`upload_options`) and the upload with its one line (`publish`). A module of no
command, shared by both."""

from __future__ import annotations

from typing import Callable

from rmjudge.cli.options import settings_options
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
