"""`rmjudge models`: what model would be used, and is it sound."""

from __future__ import annotations

import click

from rmjudge.cli.options import settings_options
from rmjudge.core.settings import EngineSettings


@click.command("models")
@settings_options(EngineSettings, only=("model",))
def command(model: str | None) -> None:
    """Show the resolved judge model: path, sha256, architecture, context length, template;
    then the GGUF judges cached from the Hugging Face Hub."""
    from rmjudge.engine.vocab import read_model_info
    from rmjudge.models.resolve import embedded_model_files, resolve_model, with_demo_adapter

    demo = with_demo_adapter(EngineSettings(model=model))  # what `score` runs without --model
    path = demo.model if model is None and demo.model else resolve_model(model)
    info = read_model_info(path)
    click.echo(f"path:           {info.path}")
    packaged, *made = embedded_model_files() or [None]
    if path in made:
        from rmjudge.models.embedded import merged_demo_adapter

        what = ("the Q8_0 copy, with the demo format adapter merged in (--no-demo-adapter: "
                "without it)," if merged_demo_adapter(path) else "the Q8_0 copy")
        click.echo(f"embedded:       {what} of {packaged} (docs/scoring.md#models)")
    click.echo(f"sha256:         {info.sha256}")
    click.echo(f"architecture:   {info.architecture}")
    click.echo(f"name:           {info.name}")
    click.echo(f"context length: {info.n_ctx_train}")
    click.echo(f"chat template:  {'yes' if info.chat_template else 'no (plain fallback)'}")
    click.echo(f"prompt suffix:  {info.prompt_suffix!r}")
    _list_hub_cache()


def _list_hub_cache() -> None:
    """Judges cached from the Hugging Face Hub (rmjudge/models/hub.py), usable as --model."""
    from rmjudge.models.hub import cache_dir, cached_ggufs

    found = cached_ggufs()
    click.echo(f"\nGGUF judges in the Hugging Face cache ({cache_dir()}): {len(found) or 'none'}")
    for g in found:
        click.echo(f"  {g.spec}  ({g.size / 2**20:.1f} MiB)")
