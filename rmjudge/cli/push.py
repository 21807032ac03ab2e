"""`rmjudge push`: upload a dataset written by `rmjudge filter` to the Hugging Face Hub."""

from __future__ import annotations

from typing import Callable

import click


def upload_options(after: str | None = None) -> Callable[[Callable], Callable]:
    """--private, --license and --dry-run: the options of an upload, declared once for `push`
    and for `filter --push-to-hub` (`after`: the option they go with, named in their help)."""
    def helptext(text: str) -> str:
        return f"{after}: {text[0].lower()}{text[1:]}" if after else text

    def decorate(f: Callable) -> Callable:
        f = click.option("--dry-run", "dry_run", default=None, metavar="DIR", help=helptext(
            "Write the folder that would be uploaded (README.md, data/train.*) to DIR and "
            "upload nothing."))(f)
        f = click.option("--license", "license_", default=None, metavar="ID", help=helptext(
            "The card's license (default: the source dataset's, when its card is in the local "
            "Hugging Face cache; else none is claimed)."))(f)
        return click.option("--private", is_flag=True,
                            help=helptext("Create the dataset repository private."))(f)

    return decorate


def publish(export: str, repo_id: str, *, private: bool = False, license_: str | None = None,
            dry_run: str | None = None, after_filter: bool = False) -> None:
    """Write the upload folder (`dry_run`) or push; shared by `push` and `filter --push-to-hub`."""
    from rmjudge.publish.hub import HubError, prepare_folder, push

    if dry_run:
        prep = prepare_folder(export, repo_id, dry_run, license_)
        click.echo(f"dry run: the upload to {repo_id} is in {prep.folder}: README.md, "
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
    click.echo(f"pushed {export} to {url}" + (" (private)" if private else ""))


@click.command("push")
@click.argument("export", metavar="EXPORT")
@click.argument("repo_id", metavar="ORG/NAME")
@upload_options()
def command(export: str, repo_id: str, private: bool, license_: str | None,
            dry_run: str | None) -> None:
    """Upload EXPORT, a dataset written by `rmjudge filter`, to the Hugging Face dataset
    repository ORG/NAME as its train split, with a generated dataset card (source, judge model
    and sha256, settings, counts, eval figures). Needs pip install '.[hub]' (in the clone) and a token
    (HF_TOKEN or `hf auth login`)."""
    publish(export, repo_id, private=private, license_=license_, dry_run=dry_run)
