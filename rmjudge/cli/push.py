"""`rmjudge push`: upload a dataset written by `rmjudge filter` to the Hugging Face Hub."""

from __future__ import annotations

from dataclasses import dataclass

import click

from rmjudge.cli.options import settings_from, settings_options
from rmjudge.cli.upload import publish, upload_options
from rmjudge.core.settings import setting
from rmjudge.publish.hub import UploadSettings


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
