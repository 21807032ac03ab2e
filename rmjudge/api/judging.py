"""`rmjudge.score` and `rmjudge.score_batches`: judge rows held in Python (or any input path)
from a notebook, through the run set-up every command uses (`rmjudge.runs.setup.judge_input`): the
same intake, schema detection, mapping, settings, defaults, store and resume as `rmjudge score`.

Without `output=`, the run store lives in a temporary folder that is removed when the call
returns (nothing is kept on disk, so nothing resumes); with `output=` it is kept, and a second
call with the same data and output resumes it. `score_batches` runs the same judging in a
worker thread and yields each committed chunk as soon as it is in the store; the thread stops
(saving what it judged) when the loop ends early or is interrupted.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from rmjudge.api.options import run_options
from rmjudge.api.tables import chunk_result, read_result, require_pandas
from rmjudge.core.errors import UserError
from rmjudge.core.settings import SettingsError

STOP_POLL_SECONDS = 0.2
CHUNKS_AHEAD = 2  # committed chunks the worker may judge ahead of the loop


def input_of(data: Any, split: str | None = None, config: str | None = None):
    """A path (str or PathLike: every input form of `rmjudge score`, with --split/--config) or
    rows held in Python (`rmjudge.io.memory.MemoryInput`)."""
    if isinstance(data, (str, os.PathLike)):
        from rmjudge.io.huggingface import with_config_split

        source = os.fspath(data)
        if not isinstance(source, str):
            raise SettingsError(f"give the input path as text, got {data!r}")
        return with_config_split(source, config, split)
    if split is not None or config is not None:
        raise SettingsError("split= and config= choose a split of a Hugging Face dataset given "
                            "by path or hf:// id; for a DatasetDict in Python pass the split "
                            "itself, e.g. data['train']")
    from rmjudge.io.memory import MemoryInput

    return MemoryInput(data)


@contextmanager
def output_path(output: str | os.PathLike | None) -> Iterator[str]:
    """The run's output: `output`, or a store in a temporary folder removed afterwards."""
    if output is not None:
        yield os.fspath(output)
        return
    from rmjudge.files import scratch

    with scratch(prefix="rmjudge-") as folder:
        yield os.path.join(folder, "judged.duckdb")


def _status(enabled: bool):
    def status(line: str) -> None:
        if enabled:
            print(line, file=sys.stderr, flush=True)
    return status


def _display(enabled: bool):
    """The commands' progress display (stderr), when asked for."""
    if not enabled:
        return None
    from rmjudge.runs.progress import run_display

    return run_display


def _check_nothing_judged(summary, source) -> None:
    """`rmjudge score`'s refusal of a run that judged nothing (every row an error row), in
    the API's words."""
    from rmjudge.runs.summaries import refuse_nothing_done

    first = next(iter(summary.error_reasons), None)
    why = f" (the first kind: {first})" if first else ""
    refuse_nothing_done(summary.judged + summary.skipped, verb="judged",
                        read=f"{summary.rows_read} rows", source=source,
                        where=f"{summary.errors} of them error rows{why}",
                        fix="fix the input (or name its columns with map=) and call again")


def _not_kept(exc: UserError, output) -> UserError:
    """An interrupt's message for a run without output=: its pairs are not kept."""
    from rmjudge.runs.pipeline import Interrupted

    if output is None and isinstance(exc, Interrupted):
        return Interrupted("interrupted; nothing was kept (no output= was given): pass "
                           "output='judged.duckdb' to keep what is judged and resume")
    return exc


def _prepared(data, engine, model, server, split, config, kw):
    """The input and the RunOptions of a call's arguments, checked before anything runs."""
    if engine is not None and (model is not None or server is not None):
        raise SettingsError("give either engine= (an engine already loaded) or model=/server=, "
                            "not both")
    if engine is not None:
        from rmjudge.api.options import settings_keywords
        from rmjudge.core.settings import EngineSettings

        loading = [k for k in kw["settings"] if k != "n_ctx"
                   and settings_keywords().get(k, (None,))[0] is EngineSettings]
        if loading:
            raise SettingsError(f"{', '.join(f'{k}=' for k in loading)} set how a model is "
                                "loaded, and engine= is loaded already: pass them to "
                                "rmjudge.load_engine(rmjudge.EngineSettings(...)) instead")
    source = input_of(data, split, config)
    opts = run_options(kw.pop("settings"), model=model, server=server, **kw)
    return source, opts


def score(data: Any, *, output: str | os.PathLike | None = None, model: str | None = None,
          server: str | dict | None = None, engine: Any = None, map: str | dict | None = None,
          label_values: str | None = None, label: str | None = None, split: str | None = None,
          config: str | None = None, limit: int | None = None, shard: str | None = None,
          commit_every: int = 8, overwrite: bool = False, rejudge_changed: bool = False,
          progress: bool = False, **settings: Any):
    """Judge preference pairs with ReflectRM, both orders, and return the result table (a
    pandas DataFrame: one row per input row, see `rmjudge.api.tables`).

    `data`: a list of dicts, a dict of columns, a pandas/polars DataFrame, a pyarrow Table, a
    `datasets.Dataset`, an iterable of dicts, or a path or hf:// id (every input of
    `rmjudge score`; `split=`/`config=` as --split/--config). The schema is recognized from the
    first row as `rmjudge score` does; `map=` names columns ({"prompt": "question", "a": "r1",
    "b": "r2", "label": "pref"} or the --map text), `label_values=`/`label=` as
    --label-values/--label.

    The judge: `model=` (a GGUF path, hf:org/repo/file.gguf or org/repo:QUANT; default
    $RMJUDGE_MODEL, else the embedded demo judge), `server=` (an OpenAI-compatible server's URL,
    or a dict with `url` and the --server-* options), or `engine=` (an engine already loaded,
    e.g. from `rmjudge.load_engine`, or a scripted one in tests). `**settings`: the judging and
    engine settings by field name (`samples=4`, `max_tokens=256`, `temperature=0.7`,
    `reflect=False`, `threads=8`, ...; docs/python.md lists them).

    `output=`: keep the run store there (.duckdb, or .parquet/.jsonl exported) and resume it on
    a second call with the same data; without it the store is temporary. `limit`, `shard`
    ("I/N"), `commit_every`, `overwrite`, `rejudge_changed`: as the options of `rmjudge score`.
    `progress=True`: the progress display and status lines on stderr.

    Raises the project's typed errors (`rmjudge.UserError` and its subclasses), never exits:
    bad settings, unreadable input, labels that need label_values=, an output in use, a run in
    which every row was an error row; `rmjudge.Interrupted` on Ctrl-C (what was judged into
    `output=` is kept)."""
    require_pandas()
    source, opts = _prepared(data, engine, model, server, split, config, dict(
        settings=settings, map=map, label_values=label_values, label=label, limit=limit,
        shard=shard, commit_every=commit_every, overwrite=overwrite,
        rejudge_changed=rejudge_changed))
    from rmjudge.runs import setup as run

    with output_path(output) as out:
        try:
            summary = run.judge_input(source, out, opts, engine=engine, status=_status(progress),
                                      progress=_display(progress))
        except UserError as exc:
            raise _not_kept(exc, output) from None
        _check_nothing_judged(summary, source)
        return _read_store(out)


def _read_store(out: str):
    import duckdb

    from rmjudge.files import store_path

    con = duckdb.connect(store_path(out), read_only=True)
    try:
        return read_result(con)
    finally:
        con.close()


def score_batches(data: Any, *, output: str | os.PathLike | None = None,
                  model: str | None = None, server: str | dict | None = None, engine: Any = None,
                  map: str | dict | None = None, label_values: str | None = None,
                  label: str | None = None, split: str | None = None, config: str | None = None,
                  limit: int | None = None, shard: str | None = None, commit_every: int = 64,
                  overwrite: bool = False, rejudge_changed: bool = False,
                  progress: bool = False, **settings: Any) -> Iterator[Any]:
    """Judge like `score`, yielding the result table of each committed chunk (about
    `commit_every` pairs, and the error rows met meanwhile) as soon as it is in the store, for
    inputs larger than memory (pass an iterable or a path) or to watch a long run. Settings,
    inputs and errors are `score`'s, checked before the first chunk; pairs judged by an earlier
    run into `output=` are not yielded again (`rmjudge.open_store(output).results` holds all).
    Ending the loop early stops the run: what was committed stays in `output=` and a later call
    resumes it."""
    require_pandas()
    source, opts = _prepared(data, engine, model, server, split, config, dict(
        settings=settings, map=map, label_values=label_values, label=label, limit=limit,
        shard=shard, commit_every=commit_every, overwrite=overwrite,
        rejudge_changed=rejudge_changed))
    from rmjudge.runs import setup as run

    from rmjudge.io.readers import detect_format

    # checked here, before the first chunk, and handed on: the run reads each option file,
    # checks the output and finds the input's format once
    style = run.check_prompting(opts.judge)
    if output is not None:
        checked = run.check_run_paths(source, os.fspath(output))
        fmt = checked.fmt
    else:  # a temporary output: nothing to check but the platform and the input
        from rmjudge.files import check_platform

        check_platform()
        fmt = detect_format(source)  # a missing or unreadable path fails here, not later
    return _batches(source, output, opts, engine, progress, style, fmt)


def _batches(source, output, opts, engine, progress, style, fmt: str) -> Iterator[Any]:
    from rmjudge.runs import setup as run

    feed = _ChunkFeed(_display(progress))
    with output_path(output) as out:
        # the output: checked before the first chunk, or a temporary one made here
        checked = run.CheckedPaths(out, fmt)

        def work() -> None:
            feed.run(lambda: run.judge_input(
                source, out, opts, engine=engine, status=_status(progress), progress=feed.watched,
                on_commit=feed.on_commit, style=style, checked=checked))

        worker = threading.Thread(target=work, name="rmjudge-score", daemon=True)
        worker.start()
        try:
            yield from feed.tables(worker)
        except KeyboardInterrupt:  # Ctrl-C in the loop: the worker saves what it judged
            feed.stop.set()
            _drain(feed.chunks, worker)
            from rmjudge.runs.pipeline import Interrupted

            error = feed.outcome.get("error")
            raise _not_kept(error if isinstance(error, Interrupted) else Interrupted(
                "interrupted; the pairs committed so far are kept in the output: call again "
                "to resume"), output) from None
        finally:
            feed.stop.set()
            _drain(feed.chunks, worker)
        error = feed.outcome.get("error")
        if error is not None:
            if isinstance(error, UserError):
                raise _not_kept(error, output) from None
            raise error
        _check_nothing_judged(feed.outcome["summary"], source)


class _ChunkFeed:
    """The worker thread's side of `score_batches`: it hands committed chunks to the loop
    through a bounded queue and stops (as interrupted) once `stop` is set."""

    def __init__(self, display):
        self.chunks: queue.Queue = queue.Queue(maxsize=CHUNKS_AHEAD)
        self.stop = threading.Event()
        self.outcome: dict[str, Any] = {}
        self.display = display

    def put(self, item) -> None:
        while True:
            if self.stop.is_set():
                raise KeyboardInterrupt  # the run saves what it has and ends as interrupted
            try:
                self.chunks.put(item, timeout=STOP_POLL_SECONDS)
                return
            except queue.Full:
                continue

    def on_commit(self, store, ids, rows) -> None:
        self.put(("chunk", chunk_result(store, ids, rows)))

    def watched(self, total, engine) -> _Watch:
        """The run's progress callback: shows progress (when asked) and stops the run."""
        return _Watch(self.stop, self.display(total, engine) if self.display is not None else None)

    def run(self, judge) -> None:
        """In the worker thread: the run's summary, or its error, for the loop; then the end."""
        try:
            self.outcome["summary"] = judge()
        except BaseException as exc:  # handed to the loop, which raises it
            self.outcome["error"] = exc
        finally:
            try:
                self.put(("end", None))
            except KeyboardInterrupt:
                pass

    def tables(self, worker: threading.Thread) -> Iterator[Any]:
        """In the loop: each chunk's table, until the run ends."""
        while True:
            try:
                kind, table = self.chunks.get(timeout=STOP_POLL_SECONDS)
            except queue.Empty:
                if not worker.is_alive() and self.chunks.empty():
                    break
                continue
            if kind == "end":
                break
            yield table


class _Watch:
    """Progress for `score_batches`' run: an interrupt once the loop has stopped."""

    def __init__(self, stop: threading.Event, shown):
        self.stop = stop
        self.shown = shown

    def __call__(self, p) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        if self.shown is not None:
            self.shown(p)

    def note(self, line: str) -> None:
        if self.shown is not None:
            self.shown.note(line)

    def close(self) -> None:
        if self.shown is not None:
            self.shown.close()


def _drain(chunks: queue.Queue, worker: threading.Thread) -> None:
    """Wait for the worker to end (it stops at its next pair or commit), taking what it
    still hands over so it never waits on a full queue."""
    while worker.is_alive():
        try:
            chunks.get(timeout=STOP_POLL_SECONDS)
        except queue.Empty:
            pass
