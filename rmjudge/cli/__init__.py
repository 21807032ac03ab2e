"""The `rmjudge` command: one module per subcommand, each a thin layer over the library."""

from __future__ import annotations

import importlib

import click

from rmjudge import __version__
from rmjudge.cli.common import UserErrorGroup

# subcommand name -> module under rmjudge.cli defining a click command called `command`.
# Modules are imported only when their command runs, so `rmjudge --help` stays fast.
COMMANDS = {
    "score": ("score", "Judge preference pairs with ReflectRM (the main job)."),
    "models": ("models", "Show the resolved judge model: path, sha256, architecture, context."),
    "formats": ("formats", "List the judge formats (--judge-format): source, labels, ties, rubric."),
    "rank": ("rank", "Rank K candidate responses per prompt (best-of-N) with pairwise ReflectRM."),
    "eval": ("eval", "Accuracy and positional consistency of a judged table vs gold labels."),
    "report": ("report", "Biases and calibration of a judged table, as one offline HTML page."),
    "view": ("view", "Explore every judgment of a judged table in the browser, offline; mark pairs."),
    "filter": ("filter", "Write a cleaned TRL preference dataset (DPO, RM or KTO) from a judged table."),
    "push": ("push", "Upload a filtered dataset with its card to the Hugging Face Hub."),
    "compare": ("compare", "Compare judges of the same input: accuracy, paired gain, kappa, flips, jury."),
    "review": ("review", "Export doubtful pairs for human review; import the labels back."),
    "bench": ("bench", "Judge standard benchmarks (RewardBench, RM-Bench, ...) with their official scoring."),
    "merge": ("merge", "Check and merge run stores judged in shards (--shard I/N) into one."),
    "ray-score": ("ray_score", "Judge on a Ray cluster with a pool of engines (pip install '.[ray]')."),
}


class LazyGroup(UserErrorGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"rmjudge.cli.{COMMANDS[name][0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="rmjudge")
def main() -> None:
    """rmjudge: label pairwise preference data offline with a ReflectRM judge (llama.cpp)."""
