"""`rmjudge filter`: write a cleaned preference dataset from a judged table."""

from __future__ import annotations

import click

from rmjudge.cli.common import check_not_being_written, fail, rewrite_failed
from rmjudge.cli.push import upload_options
from rmjudge.core.errors import DiskError
from rmjudge.core.extras import install_hint


def default_output(table: str, fmt: str) -> str:
    stem = table
    for ext in (".duckdb", ".parquet", ".jsonl", ".json"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    if stem.endswith(".judged"):
        stem = stem[: -len(".judged")]
    return f"{stem}.{fmt}.jsonl"


@click.command("filter")
@click.argument("table", metavar="TABLE")
@click.option("-o", "--output", default=None,
              help="Dataset to write, .jsonl or .parquet (default: next to TABLE, "
              "NAME.dpo.jsonl, NAME.rm.jsonl or NAME.kto.jsonl).")
@click.option("--format", "fmt", type=click.Choice(["dpo", "rm", "kto"]), default="dpo",
              show_default=True,
              help="dpo: TRL prompt/chosen/rejected; rm: chosen/rejected as whole conversations; "
              "kto: TRL prompt/completion/label, two rows per pair (chosen true, rejected false).")
@click.option("--chat", is_flag=True,
              help="dpo/kto: prompt as chat messages and the responses as assistant messages.")
@click.option("--evidence", is_flag=True,
              help="Add the judge's evidence per pair: judge_vote_share, judge_consistent, "
              "judge_verdict_ab, judge_verdict_ba (relative to the chosen response).")
@click.option("--min-confidence", default=0.5, show_default=True,
              help="Minimum share of the final votes for the judge's winner (averaged over the "
              "orders; 0.5 keeps every winner, 1.0 only unanimous ones).")
@click.option("--allow-inconsistent", is_flag=True,
              help="Keep pairs whose orders disagree when the run's --on-inconsistent policy "
              "still gave a winner (confident), and pairs with one failed order.")
@click.option("--relabel", is_flag=True,
              help="Swap chosen and rejected where the judge disagrees with the label with at "
              "least --relabel-min of the votes (default: drop such pairs).")
@click.option("--relabel-min", default=0.75, show_default=True)
@click.option("--unlabelled", type=click.Choice(["label", "drop"]), default="label",
              show_default=True,
              help="Pairs without a gold label: label them with the judge's winner, or drop them.")
@click.option("--prefer", type=click.Choice(["judge", "human"]), default="judge",
              show_default=True,
              help="human: where a human label was imported (rmjudge review import), it decides "
              "the pair (chosen = the human's pick; a human tie drops the pair).")
@click.option("--keep-columns", default="", metavar="COL,...",
              help="Columns of the judged table to carry along (passthrough columns, id, p_a, ...);"
              " passthrough columns get their input types back (numbers, lists, structs).")
@click.option("--rank-pairs", type=click.Choice(["best-worst", "all"]), default="best-worst",
              show_default=True,
              help="A ranked store (rmjudge rank): the top candidate against the bottom one per "
              "prompt, or every pair of candidates reaching --rank-margin.")
@click.option("--rank-margin", default=0.5, show_default=True,
              help="A ranked store: keep a pair only when the Bradley-Terry probability that "
              "its chosen response is better is at least this (0.5..1; ties are never kept).")
@click.option("--push-to-hub", "repo_id", default=None, metavar="ORG/NAME",
              help="Then upload the dataset with a generated card to this Hugging Face dataset "
              "repository (" + install_hint("hub") + "; token from HF_TOKEN or `hf auth login`).")
@upload_options("--push-to-hub")
def command(table: str, output: str | None, fmt: str, chat: bool, evidence: bool,
            min_confidence: float, allow_inconsistent: bool, relabel: bool, relabel_min: float,
            unlabelled: str, prefer: str, keep_columns: str, rank_pairs: str, rank_margin: float,
            repo_id: str | None, private: bool, license_: str | None,
            dry_run: str | None) -> None:
    """Write the pairs of a judged TABLE that the judge supports as a training dataset
    (Parquet or JSONL, loadable with datasets.load_dataset), and say how many were kept,
    swapped, labelled and dropped, and why.

    On a ranked store (`rmjudge rank`), the pairs come from each prompt's ranking instead:
    best against worst, or every pair above --rank-margin (docs/rank.md)."""
    from rmjudge.analysis.filter import FilterSettings, empty_warning, filter_table, render
    from rmjudge.analysis.tables import open_judged
    from rmjudge.analysis.filter_record import build_record, write_record

    if (private or license_ or dry_run) and not repo_id:
        fail("--private, --license and --dry-run go with --push-to-hub ORG/NAME")
    if repo_id:  # a bad id, a missing extra or token fails before any work
        from rmjudge.publish.hub import check_repo_id, require_hub, resolve_token

        require_hub()
        check_repo_id(repo_id)
        if not dry_run:
            resolve_token()

    fs = FilterSettings(
        min_confidence=min_confidence, consistent_only=not allow_inconsistent,
        relabel=relabel, relabel_min=relabel_min, label_unlabelled=unlabelled == "label",
        format=fmt, chat=chat, evidence=evidence, prefer=prefer,
        keep_columns=tuple(c.strip() for c in keep_columns.split(",") if c.strip()))
    out = output or default_output(table, fmt)
    check_not_being_written(table, "filter")
    from rmjudge.rank.table import is_ranked

    ranked = None
    try:
        with open_judged(table) as t:
            if is_ranked(t):
                from rmjudge.rank.outputs import RankFilterSettings, filter_ranked

                ranked = RankFilterSettings(pairs=rank_pairs, margin=rank_margin, format=fmt,
                                            chat=chat, keep_columns=fs.keep_columns)
                summary = filter_ranked(t, out, ranked)
            else:
                summary = filter_table(t, out, fs)
            write_record(out, build_record(t, summary, ranked or fs))
    except DiskError as exc:
        raise rewrite_failed(exc, "filter", out) from None
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}; choose another -o")
    if ranked is not None:
        from rmjudge.rank.outputs import render_filter

        click.echo(render_filter(summary, ranked), err=True)
    else:
        click.echo(render(summary), err=True)
    warning = empty_warning(summary)
    if warning:
        click.echo(warning, err=True)
    if repo_id:
        from rmjudge.cli.push import publish

        publish(out, repo_id, private=private, license_=license_, dry_run=dry_run,
                after_filter=True)
