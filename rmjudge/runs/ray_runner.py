"""`ray_score`: judge an input with a pool of rmjudge engines on a Ray cluster (Ray Data).

Flow (needs `pip install '.[ray]'`):
1. The driver lists the input files (a file, a directory or a glob; local paths or any URI
   pyarrow's filesystems read, such as `s3://` or `gs://`), in a stable order.
2. `ray.data.read_binary_files` reads them on the cluster and a `flat_map` cuts each file into
   *batches* of `rows_per_batch` consecutive rows with rmjudge's own readers, so row numbers and
   bad-row reasons are exactly those of `rmjudge score` (the pyarrow JSON reader behind
   `ray.data.read_json` fails a whole file on one malformed line). A batch's key is
   (file, first row, last row): the same on every rerun, whatever the cluster.
3. `map_batches` sends each batch to an actor pool of `_JudgeWorker`s (`concurrency=workers`,
   `num_gpus=1` each with `--device cuda`), each holding one engine and a `Judge`. A worker maps
   rows to pairs with `Mapper` (bad rows become error rows), judges them and writes the batch's
   `pairs`, `samples` and `errors` as Parquet files into `WORK_DIR/batches/KEY/`, built by the
   run store's own row code and moved into place only when complete.
4. The driver merges all batch files into the output DuckDB (same tables as `rmjudge score`;
   one `runs` row per `ray_score` invocation). Passthrough columns keep their types and are
   matched across batches by input key, as one `score` run names and widens them (each batch
   records its key -> column map and types in `columns.json`); the map is saved in `meta`. A
   later duplicate of a pair id across batches is moved to `errors`, as `rmjudge score` does.

Resume: a rerun of the same command meets every batch again. A batch whose folder holds its
rows as they are now (ids and content hashes, as `score` resumes) is kept as it is; rows edited
since they were judged stop the run naming them (the batches without edits are still judged),
and with `rejudge_changed` (`--rejudge-changed`) they are judged again and their batch folder
rewritten; a file that grew gets its last batch completed. A worker that dies is restarted by
Ray (`max_restarts`) and its batch retried (`max_task_retries`), and a half-done batch leaves
nothing behind. The work directory must be visible to every node (a shared filesystem). Row
numbers: with one input file they are its line (or row) numbers; with several, file k's rows are
numbered `k * 10**9 + row`.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import copy
import io
import os
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import orjson

from rmjudge.core.extras import install_hint
from rmjudge.io.mapping import Mapper
from rmjudge.runs.setup import RunOptions
from rmjudge.judging.runspec import resolve, run_record
from rmjudge.core.settings import EngineSettings, JudgeSettings

ROW_STRIDE = 10**9
INPUT_EXTENSIONS = (".jsonl", ".json", ".ndjson", ".parquet", ".csv", ".tsv")


class RayRunError(UserError):
    """The Ray run cannot go on as asked; the message says how to fix it."""


@dataclass(frozen=True)
class RaySettings:
    address: str | None = field(default=None, metadata={
        "help": "Ray cluster address (auto, ray://head:10001); default: a local Ray instance."})
    workers: int = field(default=2, metadata={"help": "Engines in the actor pool."})
    rows_per_batch: int = field(default=64, metadata={
        "help": "Input rows per batch: the unit of work, Parquet output and resume."})
    cpus_per_worker: float | None = field(default=None, metadata={
        "help": "CPUs Ray reserves per engine (default: --threads, else 1)."})
    gpus_per_worker: float | None = field(default=None, metadata={
        "help": "GPUs per engine (default: 1 with --device cuda, else 0)."})
    work_dir: str | None = field(default=None, metadata={
        "help": "Batch Parquet files (default OUTPUT.ray); must be shared by all nodes."})
    max_restarts: int = field(default=3, metadata={"help": "Restarts of a dead worker."})
    max_task_retries: int = field(default=3, metadata={
        "help": "Retries of a batch whose worker died."})

    def __post_init__(self) -> None:
        from rmjudge.core.settings import SettingsError

        if self.workers < 1:
            raise SettingsError("--workers must be at least 1")
        if self.rows_per_batch < 1:
            raise SettingsError("--rows-per-batch must be at least 1")
        if self.cpus_per_worker is not None and self.cpus_per_worker <= 0:
            raise SettingsError("--cpus-per-worker must be positive")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise SettingsError("--gpus-per-worker must be 0 or more")
        if self.max_restarts < -1 or self.max_task_retries < -1:
            raise SettingsError("--max-restarts/--max-task-retries must be -1 (forever) or more")


@dataclass
class RaySummary:
    output: str
    work_dir: str
    files: int
    batches: int  # all batches of the input
    batches_done_before: int  # skipped: already written by an earlier run
    judged: int  # pairs judged by this run
    pairs: int  # pairs in the output
    errors: int  # error rows in the output
    duplicates: int  # later copies of an id across batches, moved to errors
    generated_tokens: int
    wall_seconds: float


class EngineFactory:
    """Picklable `load_engine(settings)`; `vocab_only=True` loads the tokenizer only. The
    driver's first call (its tokenizer, after the output is checked) resolves the judge model
    once (`resolve_judge`), and the copies Ray sends the workers carry the resolved file. A
    node that lacks the model file or the adapter at the driver's path (another machine
    without the driver's cache, or with rmjudge installed elsewhere where the demo adapter is
    applied at run time) resolves the settings as given itself; the workers' check against
    the driver's settings then refuses a different model."""

    def __init__(self, settings: EngineSettings, server=None):
        self.server = server  # ServerSettings: every worker judges through that server
        self.requested = settings
        self.settings: EngineSettings | None = None  # resolved, at the first call

    def __call__(self, vocab_only: bool = False):
        from rmjudge.engine import load_engine
        from rmjudge.models.resolve import resolve_judge

        if self.server is not None:  # its model info (name, template) is what the run records
            return load_engine(self.requested, server=self.server)
        if self.settings is None:
            self.settings = resolve_judge(self.requested)
        files = [self.settings.model or ""] + ([self.settings.lora] if self.settings.lora else [])
        here = (self.settings if all(os.path.isfile(f) for f in files)
                else resolve_judge(self.requested))
        return load_engine(here, vocab_only=vocab_only)


# -- input -----------------------------------------------------------------------------------

def list_inputs(source: str) -> list[str]:
    """The input files of `source` (file, directory or glob; local or a pyarrow URI), sorted."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(source)
        prefix = source.split("://", 1)[0] + "://" if "://" in source else ""  # keep the scheme
    except (pa.ArrowInvalid, ValueError):  # a plain (relative) local path
        fs, path, prefix = pafs.LocalFileSystem(), os.path.abspath(source), ""
    except Exception as exc:  # e.g. missing credentials for an object store
        raise RayRunError(f"cannot open {source}: {str(exc).splitlines()[0]}") from None
    if any(ch in path for ch in "*?["):
        import fnmatch

        base = path[: min(path.find(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0] or "/"
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
        files = [i.path for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)]
    else:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise RayRunError(f"input not found: {source}")
        if info.type == pafs.FileType.Directory:
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            files = [i.path for i in infos if i.type == pafs.FileType.File
                     and i.path.lower().endswith(INPUT_EXTENSIONS)]
        else:
            files = [path]
    if not files:
        raise RayRunError(f"no input files in {source} (looked for {', '.join(INPUT_EXTENSIONS)})")
    return sorted(prefix + f for f in files)


SNAPSHOT = "input.jsonl"


def is_dataset_source(source: str) -> bool:
    """A Hugging Face dataset (a Hub id, or a `save_to_disk` folder or `folder@split`): read by
    the driver into the work directory (`snapshot_input`) rather than by Ray."""
    from rmjudge.io.huggingface import is_hub_source, is_saved_dataset, split_disk_source

    if is_hub_source(source):
        return True
    if "://" in source:
        return False
    return (os.path.isdir(source) and is_saved_dataset(source)) or \
        (not os.path.exists(source) and split_disk_source(source) is not None)


def snapshot_input(source: str, work: str) -> str:
    """The rows of the dataset `source`, read with rmjudge's readers (the Hub revision resolved
    as `score` resolves it), written as JSON Lines to WORK/input.jsonl (one line per row, so
    row numbers are the dataset's) on every run, so a rerun sees the rows as they are now."""
    from rmjudge.io.readers import read_rows
    from rmjudge.files import write_lines

    def lines():
        for raw in read_rows(source):
            value = raw.obj if raw.obj is not None else (raw.raw or "")
            yield orjson.dumps(value, default=str) + b"\n"

    path = os.path.join(work, SNAPSHOT)
    write_lines(path, lines())
    return path


def _file_rows(data: bytes, name: str):
    """rmjudge's readers over one file's bytes: JSONL from memory, Parquet/CSV via a temp file."""
    from rmjudge.files import scratch, write_file
    from rmjudge.io.readers import read_jsonl, read_rows

    lower = name.lower()
    if not lower.endswith((".parquet", ".csv", ".tsv")):
        yield from read_jsonl(io.BytesIO(data))  # type: ignore[arg-type]
        return
    with scratch() as tmp:
        path = os.path.join(tmp, "input" + os.path.splitext(lower)[1])
        write_file(path, data)
        yield from read_rows(path)


class _Chunker:
    """flat_map: one input file -> its batches (rows_per_batch consecutive rows each)."""

    def __init__(self, files: list[str], rows_per_batch: int, done: set[str]):
        self.index = {f: k for k, f in enumerate(files)}
        self.index.update({f.split("://", 1)[-1]: k for k, f in enumerate(files)})
        self.multi = len(files) > 1
        self.rows_per_batch = rows_per_batch
        # finished batches by (file, first row): a batch met again is checked against its
        # folder, which may end at another row when its file grew since
        self.done = {d.rsplit("-", 1)[0]: d for d in done}

    def _file_index(self, path: str) -> int:
        for p in (path, path.split("://", 1)[-1], os.path.abspath(path)):
            if p in self.index:
                return self.index[p]
        raise RayRunError(f"Ray read a file the driver did not list: {path}")

    def __call__(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        k = self._file_index(row["path"])
        name = os.path.basename(row["path"])
        offset = k * ROW_STRIDE if self.multi else 0
        out, chunk = [], []

        def flush() -> None:
            first, last = chunk[0][0], chunk[-1][0]
            start = f"f{k:05d}-r{first:012d}"
            out.append({"key": f"{start}-{last:012d}", "stored": self.done.get(start, ""),
                        "rows": orjson.dumps(chunk, default=str)})
            chunk.clear()

        for raw in _file_rows(row["bytes"], name):
            err = raw.error if raw.error is None or not self.multi else f"{name}: {raw.error}"
            chunk.append([offset + raw.row_number, raw.obj, err, raw.raw])
            if len(chunk) >= self.rows_per_batch:
                flush()
        if chunk:
            flush()
        return out


# -- workers ---------------------------------------------------------------------------------

class _JudgeWorker:
    """An actor holding one engine; judges one batch per call into WORK_DIR/batches/KEY/."""

    def __init__(self, factory: Callable, opts: RunOptions, settings: dict, work_dir: str,
                 run_id: int, style=None):
        from rmjudge.runs.setup import build_judge, run_spec

        self.engine = factory()
        # this worker's, built once, with the prompt style the driver read (option files are
        # read once per run, not once per worker)
        spec = run_spec(self.engine, opts, style)
        mine = spec.verdict_settings()
        if orjson.loads(orjson.dumps(mine)) != settings:
            from rmjudge.store import describe_differences

            raise RayRunError(f"this node's engine differs from the driver's "
                              f"({describe_differences(settings, mine)}); install the same model "
                              "file on every node")
        self.judge = build_judge(self.engine, opts, spec)
        self.mapper = opts.mapper  # this worker's own copy (Ray hands each actor its own)
        self.rejudge_changed = opts.rejudge_changed
        self.settings = settings
        self.batches = os.path.join(work_dir, "batches")
        self.run_id = run_id

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        out: dict[str, list] = {k: [] for k in ("key", "state", "judged", "errors", "tokens",
                                                "seconds", "changed")}
        stored = batch.get("stored")
        for n, (key, blob) in enumerate(zip(batch["key"], batch["rows"])):
            t0, tok0 = time.monotonic(), self.engine.generated_tokens
            state, n_pairs, n_err, changed = self._batch(
                str(key), orjson.loads(bytes(blob)), str(stored[n]) if stored is not None else "")
            out["key"].append(str(key))
            out["state"].append(state)
            out["judged"].append(n_pairs)
            out["errors"].append(n_err)
            out["tokens"].append(self.engine.generated_tokens - tok0)
            out["seconds"].append(time.monotonic() - t0)
            out["changed"].append(orjson.dumps(changed).decode())
        return out

    def _batch(self, key: str, rows: list, stored: str) -> tuple[str, int, int, list[int]]:
        """Judge one batch into its folder. Returns (state, pairs judged, error rows, changed
        rows refused): state `new` (judged whole), `done` (its folder holds these rows
        already), `updated` (a finished batch whose rows were edited, or whose file grew: the
        rows not judged as they are now are judged, the folder rewritten) or `changed` (edited
        rows met without `--rejudge-changed`: nothing written)."""
        from rmjudge.io.intake import ChangedRows
        from rmjudge.io.readers import RawRow
        from rmjudge.files import scratch
        from rmjudge.runs.setup import judge_rows
        from rmjudge.store import Store, batch_judged, load_batch, write_batch

        final = os.path.join(self.batches, key)
        previous = os.path.join(self.batches, stored) if stored else None
        if previous is None and os.path.isdir(final):  # another attempt finished it
            return "done", 0, 0, []
        judged = batch_judged(previous) if previous is not None else None
        raw_rows = (RawRow(rn, obj, error, raw) for rn, obj, error, raw in rows)
        try:
            results, failures, replaced = judge_rows(self.judge, raw_rows, self.mapper,
                                                     judged=judged,
                                                     rejudge_changed=self.rejudge_changed)
        except ChangedRows as exc:
            return "changed", 0, 0, list(exc.rows)
        if previous is not None and stored == key and not results and not replaced:
            return "done", 0, 0, []  # the same rows as judged: the folder stands
        errs = [f.as_error() for f in failures]
        with scratch() as local:
            store = Store(os.path.join(local, "batch.duckdb"))
            try:
                store.set_meta("settings", self.settings)
                store.run_id = self.run_id
                if previous is not None:
                    load_batch(store, previous)
                write_batch(store, results, errs, final, replaced=replaced,
                            previous=previous)  # a new batch: a concurrent attempt's wins
            finally:
                store.close()
        return ("new" if previous is None else "updated"), len(results), len(errs), []


# -- driver ----------------------------------------------------------------------------------

def _read_json(path: str) -> Any:
    with open(path, "rb") as f:
        return orjson.loads(f.read())


def ray_score(source: str, js: JudgeSettings, es: EngineSettings, output: str, *,
              rs: RaySettings = RaySettings(), mapping: dict[str, str] | None = None,
              mapper: Mapper | None = None,
              overwrite: bool = False, rejudge_changed: bool = False,
              engine_factory: Callable | None = None,
              on_batch: Callable[[dict, int, int], None] | None = None) -> RaySummary:
    """Judge `source` on Ray into the DuckDB run store `output`. See the module doc. `mapper`:
    how rows become pairs (`--label-values`, `--label`; default: `mapping` alone), which every
    worker gets a copy of. `rejudge_changed`: rows of finished batches edited since they were
    judged are judged again (without it, the run stops naming them, as `rmjudge score` does)."""
    from rmjudge.prompts.choice import run_style

    # read once, before anything is done
    style = run_style(js.criteria, js.prompt_template, js.judge_format)
    try:
        import ray
    except ImportError:
        raise RayRunError(f"Ray is not installed: {install_hint('ray')}") from None
    check_address(rs.address)
    why = unreachable(rs.address)  # before anything is written (Ray retries for minutes)
    if why is not None:
        raise RayRunError(f"cannot reach the Ray cluster at {rs.address}: {why}; check --address "
                          "(ray status on the head node prints the address to give)")
    from rmjudge.files import make_dir

    work = _prepare_output(output, rs, overwrite)
    started = time.monotonic()
    dataset = is_dataset_source(source)
    files = [] if dataset else list_inputs(source)
    opts = RunOptions(js, es, mapper or Mapper(mapping, seed=js.seed), overwrite=overwrite,
                      rejudge_changed=rejudge_changed)
    if files and "://" not in files[0]:  # labels that need --label-values stop the run here
        _check_labels(files[0], opts)
    factory = engine_factory or EngineFactory(es)
    info = factory(vocab_only=True).info
    # the run's spec on the model the driver's tokenizer describes (each worker builds its own)
    settings = orjson.loads(orjson.dumps(resolve(js, info, es.n_ctx, style).verdict_settings()))
    _check_same_settings(work, settings)
    _connect(ray, rs)  # nothing is written before the cluster is reached
    make_dir(os.path.join(work, "batches"))
    if dataset:  # rows Ray cannot read itself: read once here, as `score` reads them
        files = [snapshot_input(source, work)]
        _check_labels(files[0], opts)  # the labels, as for a file below
    _keep_settings(work, settings)
    log = _RunLog(work, run_record(info, orjson.dumps(settings).decode(), source,
                                   f"ray:{rs.workers}"))
    ds = _judged_batches(ray, files, work, rs, es, {
        "factory": factory, "opts": opts, "settings": settings, "work_dir": work,
        "run_id": log.run["run_id"], "style": style})
    tally = _tally(ds, on_batch, log)
    if tally.changed:
        log.close("failed", pairs_judged=tally.judged, generated_tokens=tally.tokens)
        raise RayRunError(_changed_message(source, work, tally.changed))
    log.close("finished", pairs_judged=tally.judged, generated_tokens=tally.tokens,
              wall_seconds=time.monotonic() - started)
    pairs, errors, dups = assemble(work, output, settings, log.runs, _identity(source, files))
    return RaySummary(output=output, work_dir=work, files=len(files),
                      batches=tally.batches, batches_done_before=tally.done, judged=tally.judged,
                      pairs=pairs, errors=errors, duplicates=dups, generated_tokens=tally.tokens,
                      wall_seconds=time.monotonic() - started)


def _prepare_output(output: str, rs: RaySettings, overwrite: bool) -> str:
    """Check the output store and the work directory (removing it with `overwrite` when it is a
    ray-score work directory); the work directory's absolute path."""
    from rmjudge.files import check_not_busy, output_format, remove_tree
    from rmjudge.store import LEAVE_FIX, is_rmjudge_store, not_a_store_message

    if output_format(output) != "duckdb":
        raise RayRunError("ray-score writes a DuckDB run store: give -o a .duckdb name (export "
                          "with rmjudge score's Parquet/JSONL outputs or DuckDB COPY)")
    work = os.path.abspath(rs.work_dir or output + ".ray")
    if os.path.exists(work) and not os.path.isdir(work):
        raise RayRunError(f"--work-dir {work} is a file, not a folder; it is left untouched: "
                          "pass another --work-dir")
    if os.path.exists(output) and not is_rmjudge_store(output):
        raise RayRunError(not_a_store_message(output, LEAVE_FIX, exists=True))
    check_not_busy(output)
    if overwrite and os.path.isdir(work):
        if not os.path.exists(os.path.join(work, "settings.json")):
            raise RayRunError(f"{work} is not a ray-score work directory (no settings.json); it "
                              "is left untouched: pass another --work-dir")
        remove_tree(work)
    return work


def _check_labels(path: str, opts: RunOptions) -> None:
    """Open the input as `score` does, so labels that need --label-values stop the run on the
    driver; on a copy of the mapper, so the one the workers get stays fresh."""
    from rmjudge.runs.setup import open_input

    open_input(path, copy.deepcopy(opts.mapper))


def _check_same_settings(work: str, settings: dict) -> None:
    """RayRunError when the work directory holds batches made with other settings."""
    from rmjudge.store import RESUME_FIX, other_settings_message

    settings_path = os.path.join(work, "settings.json")
    if os.path.exists(settings_path):
        old = _read_json(settings_path)
        if old != settings:
            raise RayRunError(other_settings_message(f"{work} holds batches", old, settings,
                                                     RESUME_FIX))


def _keep_settings(work: str, settings: dict) -> None:
    """Record the run's settings in the work directory unless it holds them already (the run
    checked them with `_check_same_settings` before it connected)."""
    from rmjudge.files import write_json

    settings_path = os.path.join(work, "settings.json")
    if not os.path.exists(settings_path):
        write_json(settings_path, settings)


RAY_CLIENT_PORT = 10001  # Ray's default for ray://HOST without a port


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT, [IPV6]:PORT, ray://HOST[:PORT]; None when it is not one."""
    client = address.startswith("ray://")
    rest = address[len("ray://"):] if client else address
    host, sep, port = rest.rpartition(":")
    if client and (not sep or host.startswith("[") and not host.endswith("]")
                   or rest.startswith("[") and rest.endswith("]")):
        host, port = rest, str(RAY_CLIENT_PORT)  # ray://HOST, ray://[IPV6]
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536 \
            or "/" in host:
        return None
    return host.strip("[]"), int(port)


def check_address(address: str | None) -> None:
    """RayRunError unless `address` is None (a local Ray instance), `auto` or a form
    `_host_port` reads; Ray takes other forms with minutes of retries or a traceback."""
    if address is None or address == "auto" or _host_port(address) is not None:
        return
    raise RayRunError(f"--address {address!r} is not a Ray address: give auto (the cluster this "
                      "node belongs to), HOST:PORT (the head's GCS, port 1 to 65535) or "
                      "ray://HOST[:PORT] (Ray Client), or leave it out for a local instance")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type 4, stream 0
HTTP2_SETTINGS = 0x04


def unreachable(address: str | None, timeout: float = 5.0) -> str | None:
    """Why a HOST:PORT (or ray://HOST[:PORT]) address is not a Ray head, or None when it answers
    as one or is not of that form ("auto", None): it takes no TCP connection, or it takes one
    but does not speak gRPC (a Ray head's GCS and its Ray Client server both do; the dashboard's
    port, a web server or a port that never answers does not). Ray itself retries such an
    address for minutes, or forever; this answers within about twice `timeout` seconds. With
    RAY_USE_TLS set, the connection alone is checked (the head expects a TLS handshake first)."""
    import socket

    where = _host_port(address) if address else None
    if where is None:
        return None
    try:
        sock = socket.create_connection(where, timeout=timeout)
    except (OSError, ValueError, OverflowError) as exc:
        return str(exc) or type(exc).__name__
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").strip().lower() not in ("", "0", "false"):
            return None
        if _answers_http2(sock, timeout):
            return None
    return ("it takes connections but does not answer as a Ray head (no gRPC reply within "
            f"{timeout:g} s): give the head's GCS port (6379 unless `ray start --port` chose "
            f"another) or ray://HOST:{RAY_CLIENT_PORT} for Ray Client, not the dashboard's port")


def _answers_http2(sock, timeout: float) -> bool:
    """Whether the server on `sock` answers an HTTP/2 connection preface (gRPC's transport)
    with its SETTINGS frame, as the HTTP/2 standard (RFC 9113, 3.4) has every server do."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    try:
        sock.sendall(HTTP2_PREFACE + HTTP2_EMPTY_SETTINGS)
        head = b""
        while len(head) < 9:  # a frame header: length (3), type (1), flags (1), stream (4)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except (socket.timeout, OSError):
        return False
    return head[3] == HTTP2_SETTINGS


def _connect(ray, rs: RaySettings) -> None:
    """Start or reach the Ray cluster (once per process)."""
    if ray.is_initialized():
        return
    try:
        ray.init(address=rs.address, include_dashboard=False, ignore_reinit_error=True)
    except Exception as exc:  # connection refused, no cluster at "auto", ...
        where = f"the Ray cluster at {rs.address}" if rs.address else "a local Ray instance"
        token = ("; if the head uses token authentication (`ray start` of Ray 2.60 turns it on "
                 "and says \"Token authentication is enabled\"), set "
                 "RAY_AUTH_MODE=token with the head's token in ~/.ray/auth_token "
                 "(docs/scaling.md)"
                 if rs.address and os.environ.get("RAY_AUTH_MODE", "").lower() != "token"
                 else "")
        raise RayRunError(f"cannot start or reach {where}: {str(exc).strip().splitlines()[-1]}; "
                          f"check --address (ray status on the head node){token}") from None


class _RunLog:
    """The work directory's `runs.json`: this invocation's row is added as running, then closed
    as finished or failed."""

    def __init__(self, work: str, record: dict):
        from rmjudge.files import write_json

        self.path = os.path.join(work, "runs.json")
        self.runs = _read_json(self.path) if os.path.exists(self.path) else []
        self.run = {"run_id": len(self.runs) + 1, **record,
                    "started": datetime.now(timezone.utc).isoformat(), "status": "running"}
        self.runs.append(self.run)
        write_json(self.path, self.runs)

    def close(self, status: str, **fields) -> None:
        from rmjudge.files import write_json

        self.run.update(status=status, finished=datetime.now(timezone.utc).isoformat(), **fields)
        write_json(self.path, self.runs)


def _judged_batches(ray, files: list[str], work: str, rs: RaySettings, es: EngineSettings,
                    worker_kwargs: dict):
    """The Ray Data pipeline: read the files, cut them into the batches not yet done, judge each
    on the actor pool; one row per batch (its state and counts)."""
    from rmjudge.store import recover_batches

    recover_batches(os.path.join(work, "batches"))
    done = {d for d in os.listdir(os.path.join(work, "batches")) if not d.startswith(".")}
    gpus = rs.gpus_per_worker if rs.gpus_per_worker is not None else (1 if es.device == "cuda" else 0)
    cpus = rs.cpus_per_worker or float(es.threads or 1)
    ds = ray.data.read_binary_files(files, include_paths=True, num_cpus=0)  # light: no CPU held back
    ds = ds.flat_map(_Chunker(files, rs.rows_per_batch, done), num_cpus=0)
    ds = _one_batch_per_block(ds)
    with warnings.catch_warnings():  # restarts/retries have no named parameter yet
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        return ds.map_batches(
            _JudgeWorker, batch_size=1, compute=_pool(ray, rs.workers),
            num_cpus=cpus, num_gpus=gpus, fn_constructor_kwargs=worker_kwargs,
            max_restarts=rs.max_restarts, max_task_retries=rs.max_task_retries)


@dataclass
class _Tally:
    """What the batches of one run came to."""
    judged: int = 0
    tokens: int = 0
    batches: int = 0
    done: int = 0
    changed: list[int] = field(default_factory=list)


def _tally(ds, on_batch, log: _RunLog) -> _Tally:
    """Run the pipeline and count its batches; a failure closes the run as failed."""
    tally = _Tally()
    try:
        for row in ds.iter_rows():
            tally.judged += int(row["judged"])
            tally.tokens += int(row["tokens"])
            tally.batches += 1
            if row["state"] == "done":
                tally.done += 1
            tally.changed += orjson.loads(row["changed"])
            if on_batch and row["state"] in ("new", "updated"):
                on_batch(row, tally.batches, tally.judged)
    except Exception as exc:
        log.close("failed")
        first = str(exc).strip().splitlines()
        raise RayRunError(f"the Ray run failed ({first[-1] if first else type(exc).__name__}); "
                          "rerun the same command to resume from the finished batches") from exc
    return tally


def _changed_message(source: str, work: str, changed: list[int]) -> str:
    """The error naming the rows edited since they were judged, as `rmjudge score` words it."""
    from rmjudge.io.intake import CHANGED_SHOWN, ChangedRows
    from rmjudge.runs.pipeline import changed_rows_message

    changed = sorted(changed)
    return changed_rows_message(
        source, work, ChangedRows(changed[:CHANGED_SHOWN], len(changed) > CHANGED_SHOWN))


def _pool(ray, workers: int):
    """`workers` engines, each handed one batch at a time, so batches spread over all of them
    (a batch takes seconds to minutes; queueing more on one engine only unbalances the pool)."""
    try:
        return ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1)
    except TypeError:  # older Ray
        return ray.data.ActorPoolStrategy(size=workers)


def _one_batch_per_block(ds):
    """A file's batches come out of one read task; emit each as its own block (this dataset's
    block-size target set below one row) so every actor call gets one batch and every worker has
    work. No repartition step: it would need a whole free CPU beside the engines."""
    ds.context.target_max_block_size = 1
    return ds


def _identity(source: str, files: list[str]) -> dict | None:
    """The input's identity as `score` records it (`io.intake.input_identity`: the first
    readable row's fingerprint, and a Hub dataset's revision and commit), for `compare` and
    `merge`; None for inputs on an object store (not read here)."""
    if not files or "://" in files[0]:
        return None
    from rmjudge.io.intake import input_identity
    from rmjudge.io.readers import read_rows

    first = next((r for r in read_rows(files[0]) if r.obj is not None), None)
    return input_identity(source, first)


def assemble(work: str, output: str, settings: dict, runs: list[dict],
             identity: dict | None = None) -> tuple[int, int, int]:
    """Merge WORK/batches/*/{pairs,samples,errors}.parquet into the DuckDB store `output`
    (built aside and moved into place by the store), with the input's `identity` recorded as
    `score` records it. Returns (pairs, errors, duplicates moved to errors)."""
    from rmjudge.store import NewStore, import_batches

    new = NewStore(output, settings, overwrite=True)
    try:
        new.store.check_input(identity)
        counts = import_batches(new.store, os.path.join(work, "batches"), runs)
    except BaseException:
        new.discard()
        raise
    new.install()
    return counts


__all__ = ["RaySettings", "RaySummary", "RayRunError", "EngineFactory", "ray_score", "assemble",
           "list_inputs"]
