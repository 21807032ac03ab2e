"""What the CLI prints and how it exits, checked the way users meet it: the `Error:` line on
stderr and the exit code (CliRunner or a subprocess), the summary's error rows, the progress
display at 80 columns, the dry run's time estimate, and the exit-code table of the README."""

from __future__ import annotations

import io
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from rmjudge.cli import main
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.core.errors import EXIT_BUSY, EXIT_CODES, EXIT_DISK, EXIT_STRICT, EXIT_USER
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import JudgeSettings
from helpers import judge_with
from test_score import length_judge

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
PAIRS = str(DATA / "pandalm_5.jsonl")


def write_jsonl(path: Path, objs: list[dict]) -> str:
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return str(path)


def good(i: int) -> dict:
    return {"id": f"p{i}", "prompt": f"Question {i}?", "chosen": f"long answer {i} " * 3,
            "rejected": f"short {i}"}


@pytest.fixture
def scripted(monkeypatch):
    """`rmjudge score` judging with the scripted engine instead of a model (in-process)."""
    judge_with(monkeypatch, lambda: ScriptedEngine(length_judge))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def rmjudge(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmjudge", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, **kw)


# -- 13. the summary's error rows -------------------------------------------------------------

def test_summary_buckets_error_rows_by_kind_with_a_few_row_numbers(tmp_path, scripted):
    bad = [{"id": f"b{i}", "prompt": "q", "rejected": "x"} for i in range(3000)]
    src = write_jsonl(tmp_path / "in.jsonl", [good(0)] + bad + [good(1)])
    with open(src, "ab") as f:
        f.write(b"{not json\n" * 2)
    r = cli("score", src, "-o", tmp_path / "o.duckdb", "--samples", 2)
    assert r.exit_code == 0, r.output
    err = r.stderr
    assert "no two responses found: 3000 rows (rows 2, 3, 4, ...)" in err
    assert "is not valid JSON: 2 rows (rows 3003, 3004)" in err
    assert len(err) < 2000 and max(map(len, err.splitlines())) < 200


def test_summary_shows_a_few_kinds_and_counts_the_rest(tmp_path, scripted):
    kinds = [b"{bad json", b"[1]", b'"text"', b"5", b"null", b"true",
             b'{"prompt": "q", "rejected": "x"}', b'{"prompt": "q", "chosen": "x"}',
             b'{"prompt": "q", "chosen": "", "rejected": "x"}']
    bad = [line for k, line in enumerate(kinds) for _ in range(k + 1)]  # 1, 2, ... 9 rows
    src = tmp_path / "in.jsonl"
    src.write_bytes(orjson.dumps(good(0)) + b"\n" + b"\n".join(bad) + b"\n")
    r = cli("score", src, "-o", tmp_path / "o.duckdb", "--samples", 2)
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    start = lines.index("  error rows (details and raw text in the errors table):") + 1
    block = list(itertools.takewhile(lambda ln: ln.startswith("    "), lines[start:]))
    shown = [ln for ln in block if not ln.startswith("     ")]  # a kind, not its wrapped tail
    # a row without "chosen" and one without "rejected" are one kind (no two responses)
    assert len(shown) == 6 and shown[-1] == "    and 3 more kinds: 6 rows", r.stderr
    counts = [int(m) for m in re.findall(r": (\d+) rows?\b", "\n".join(shown))]
    assert counts == [15, 9, 6, 5, 4, 6], r.stderr


def test_error_kinds_drop_row_numbers_values_and_ids():
    from rmjudge.runs.pipeline import error_kind

    assert error_kind("row 7: duplicate id 'a' (first seen on row 2); give each pair a unique "
                      "id") == error_kind("row 9: duplicate id 'b' (first seen on row 3); x")
    assert error_kind("line 3 is not valid JSON (unexpected character); fix or remove the "
                      "line") == error_kind("line 40 is not valid JSON (other); fix")
    assert error_kind("row 5: the pair needs 3001 prompt tokens + 256 to generate, more than "
                      "the model's context of 2048; shorten") == error_kind(
        "row 6: the pair needs 4000 prompt tokens + 256 to generate, more than the model's "
        "context of 2048; shorten")
    assert error_kind("row 2: field 'chosen' is empty") != error_kind("row 2: field 'rejected' "
                                                                      "is empty")


# -- 14. exit codes ---------------------------------------------------------------------------

def test_usage_errors_exit_1_and_only_strict_exits_2(tmp_path, scripted):
    for args in (["score", PAIRS, "--bogus"], ["score"], ["nosuch"], ["--bogus"],
                 ["score", PAIRS, "--samples", "abc"], ["score", PAIRS, "--orders", "xy"]):
        r = cli(*args)
        assert r.exit_code == EXIT_USER, (args, r.output)
        assert "Error: " in r.stderr
    src = write_jsonl(tmp_path / "in.jsonl", [good(0), {"prompt": "q"}, good(1)])
    r = cli("score", src, "-o", tmp_path / "o.duckdb", "--samples", 2, "--strict")
    assert r.exit_code == EXIT_STRICT, r.output
    r = cli("score", src, "-o", tmp_path / "o2.duckdb", "--samples", 2)
    assert r.exit_code == 0, r.output


def test_training_and_export_groups_exit_1_on_usage_errors():
    from rmjudge.quantize.cli import main as export_main
    from rmjudge.training.cli import main as train_main

    for group in (train_main, export_main):
        for args in (["--bogus"], ["nosuch"]):
            r = CliRunner().invoke(group, args)
            assert r.exit_code == EXIT_USER, (group.name, args, r.output)


@pytest.mark.parametrize("command", [["sft", "{src}", "-o", "{out}"],
                                     ["build-data", "{src}", "-o", "{out}/train.jsonl"]])
@pytest.mark.parametrize("source", ["missing.jsonl", "rows.xlsx"])
def test_training_on_an_input_it_cannot_read_is_one_error_line_before_anything(
        tmp_path, monkeypatch, command, source):
    """Before, `sft` and `build-data` loaded the rollout model, made the output folder and
    wrote a rollout cache file into it, then said the input was not found."""
    import rmjudge.engine
    from rmjudge.training.cli import main as train_main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(rmjudge.engine, "load_engine", no_model)
    if source.endswith(".xlsx"):
        (tmp_path / source).write_bytes(b"PK\x03\x04 not rows")
    src, out = str(tmp_path / source), str(tmp_path / "out")
    before = sorted(os.listdir(tmp_path))
    r = CliRunner().invoke(train_main, [a.format(src=src, out=out) for a in command])
    assert r.exit_code == EXIT_USER, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and source in lines[0], r.output
    assert sorted(os.listdir(tmp_path)) == before  # no output folder, no rollout cache


def test_readme_exit_code_table_is_generated_from_exit_codes():
    from rmjudge.core.errors import exit_code_table

    readme = (ROOT / "README.md").read_text()
    assert exit_code_table() in readme
    assert [int(c) for c in re.findall(r"^\| (\d+) \|", readme, re.M)] == list(EXIT_CODES)


# -- 9. seeds -------------------------------------------------------------------------------

def test_a_seed_beyond_64_bits_is_one_error_line_before_the_model_loads(tmp_path):
    r = rmjudge("score", PAIRS, "-o", tmp_path / "o.duckdb", "--seed", 2**64)
    assert r.returncode == EXIT_USER
    assert r.stderr == ("Error: --seed must be a whole number from -9223372036854775808 to "
                        "18446744073709551615 (a 64-bit integer), got 18446744073709551616\n")
    assert not (tmp_path / "o.duckdb").exists()
    r = rmjudge("score", PAIRS, "--dry-run", "--seed", -(2**63) - 1)
    assert r.returncode == EXIT_USER and r.stderr.startswith("Error: --seed must be")


@pytest.mark.parametrize("seed", [2**64 - 1, -(2**63)])
def test_the_ends_of_the_seed_range_are_judged_and_recorded(tmp_path, seed):
    s = score(PAIRS, ScriptedEngine(length_judge), JudgeSettings(samples=2, seed=seed),
              output=str(tmp_path / "o.duckdb"))
    assert s.judged == 5
    again = score(PAIRS, ScriptedEngine(length_judge), JudgeSettings(samples=2, seed=seed),
                  output=str(tmp_path / "o.duckdb"))
    assert again.skipped == 5  # the recorded seed reads back equal: the run resumes


# -- 17. wording and codes of filter and eval ------------------------------------------------

@pytest.fixture
def judged(tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"Question {i}?", "chosen": f"long answer {i} " * 200,
             "rejected": f"short {i}"} for i in range(20)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = str(tmp_path / "j.duckdb")
    score(src, ScriptedEngine(length_judge), JudgeSettings(samples=2), output=out)
    return out


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
from rmjudge.cli import main
sys.argv = ["rmjudge"] + sys.argv[1:]
main()
"""


def test_filter_on_a_full_disk_says_to_run_it_again_not_to_resume(tmp_path, judged):
    out = tmp_path / "out.jsonl"
    r = subprocess.run([sys.executable, "-c", FULL_DISK, "filter", judged, "-o", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == EXIT_DISK, r.stderr
    assert r.stderr.startswith(f"Error: cannot write {out}: ") and r.stderr.count("\n") == 1
    assert "resume" not in r.stderr
    assert "then run `rmjudge filter` again" in r.stderr
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".new-" in p]


@contextmanager
def store_lock_held(store: str):
    """A running `score` as another process sees it: the lock of its run store is held."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from rmjudge.store import Store; s = Store(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(60)"), store], stdout=subprocess.PIPE,
        text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("name", ["run.parquet", "run.jsonl"])
def test_eval_on_an_export_a_running_job_has_not_written_yet_is_busy(tmp_path, name):
    from rmjudge.files import store_path

    export = tmp_path / name
    with store_lock_held(store_path(str(export))):
        results = {cmd: rmjudge(cmd, export) for cmd in ("eval", "report", "filter")}
    for cmd, r in results.items():
        assert r.returncode == EXIT_BUSY, (cmd, r.stderr)
        assert r.stderr == (f"Error: {export} is not there yet: a running rmjudge job is "
                            f"writing it (it holds the lock {store_path(str(export))}.lock); "
                            f"wait for it to finish, then run `rmjudge {cmd}` again\n")
    r = rmjudge("eval", export)  # no job: the file is simply missing
    assert r.returncode == EXIT_USER and "not found" in r.stderr


# -- 16. the progress display -----------------------------------------------------------------

def frame(tp, width: int = 80) -> list[str]:
    """The lines the progress display draws now, rendered at `width` columns."""
    from rich.console import Console

    c = Console(file=io.StringIO(), width=width, record=True, force_terminal=True)
    c.print(tp.progress.get_renderable())  # what rich's live display draws
    return c.export_text().splitlines()


def test_progress_keeps_bar_count_elapsed_and_eta_at_80_columns():
    from rich.console import Console

    from rmjudge.cli.common import TerminalProgress
    from rmjudge.runs.pipeline import Progress

    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    tp = TerminalProgress(100_000, activity=lambda: (12_345, 678), console=console)
    try:
        first = frame(tp)
        assert "0/100000 rows" in first[0] and "━" in first[0] and "ETA" in first[0]
        assert "first pairs in progress: 12,345 prompt tokens evaluated, 678 generated" in first[1]
        p = Progress(done=1234, errors=56789, generations=100_000, parse_failures=31337,
                     generated_tokens=9_876_543, flips=4321)
        p.started -= 3725
        tp(p)
        bar, health = frame(tp)
        assert len(bar) <= 80 and len(health) <= 80
        assert re.search(r"judging [━╸╺]{20,} +58023/100000 rows \d:\d\d:\d\d ETA "
                         r"(-:--:--|\d:\d\d:\d\d)$", bar), bar
        assert health == "  0.33 pairs/s | 2651 tok/s | parse fail 31% | flips 4321 | errors 56789"
        # narrower: the health line leaves out its last figures, whole (no word is cut), and
        # the bar line keeps its place
        bar, health = frame(tp, width=64)
        assert re.search(r"judging [━╸╺]+ +58023/100000 rows \d:\d\d:\d\d ETA", bar), bar
        assert health == "  0.33 pairs/s | 2651 tok/s | parse fail 31% | flips 4321"
        live = TerminalProgress(10, activity=lambda: (12_345, 678), console=console)
        try:
            assert frame(live, width=64)[1] == "  first pairs: 12,345 prompt tokens, 678 generated"
        finally:
            live.close()
    finally:
        tp.close()


def test_a_note_is_a_line_of_its_own_above_the_display():
    from rich.console import Console

    from rmjudge.cli.common import TerminalProgress

    buf = io.StringIO()
    tp = TerminalProgress(4, console=Console(file=buf, width=80, force_terminal=True))
    tp.note("rmjudge: input read as [trl] pairs")
    tp.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert "\nrmjudge: input read as [trl] pairs\n" in "\n" + text.replace("\r", "\n")


TMUX_RUN = """
import sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]  # this checkout's rmjudge and tests
import rmjudge.engine, rmjudge.models.resolve
from rmjudge.engine.fake import ScriptedEngine
from test_score import length_judge

class Slow(ScriptedEngine):
    prompt_tokens_evaluated = 0
    def generate(self, requests):
        self.prompt_tokens_evaluated += 100 * len(requests)
        time.sleep(0.4)
        return super().generate(requests)

rmjudge.engine.load_engine = lambda *a, **k: Slow(length_judge, pairs_in_flight=1)
rmjudge.models.resolve.resolve_model = lambda m: "judge.gguf"
from rmjudge.cli import main
sys.argv = ["rmjudge", "score", sys.argv[2], "-o", sys.argv[3], "--samples", "2"]
main()
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_progress_on_an_80_column_terminal(tmp_path):
    """The real terminal: the "input read as" line ends before the bar, the first pair shows
    live work, and the bar line keeps its count and times once the health line appears."""
    script = tmp_path / "run.py"
    script.write_text(TMUX_RUN)
    src = write_jsonl(tmp_path / "in.jsonl", [good(i) for i in range(4)])
    session = f"rmjudge-test-{os.getpid()}"
    cmd = (f"cd {ROOT} && {sys.executable} {script} {ROOT} {src} {tmp_path / 'o.duckdb'}; "
           "sleep 30")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "30", cmd],
                   check=True)
    screens = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True).stdout
            screens.append(screen)
            if "rmjudge: read 4 rows" in screen:
                break
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session])
    early = [s for s in screens if "0/4 rows" in s]
    assert early, screens[-1]
    lines = early[-1].splitlines()
    note = next(i for i, ln in enumerate(lines) if ln.startswith("rmjudge: input read as"))
    bar = next(i for i, ln in enumerate(lines) if "0/4 rows" in ln)
    assert bar > note and "judging" not in "".join(lines[note:bar]), early[-1]
    assert "first pairs in progress:" in lines[bar + 1]
    final = screens[-1].splitlines()
    bar = next(ln for ln in final if "4/4 rows" in ln)
    assert "━" in bar and re.search(r"0:00:\d\d ETA 0:00:00", bar), bar


# -- 8. chat templates that cannot render -----------------------------------------------------

def gguf_with_template(src: str, dst: Path, template: str) -> str:
    """A copy of the GGUF `src` whose tokenizer.chat_template is `template`, padded with spaces
    to the original's length so every offset after it stays valid (a byte patch)."""
    import struct

    with open(src, "rb") as f:
        head = f.read(16 << 20)
    key = b"tokenizer.chat_template"
    at = head.find(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    kind, n = struct.unpack("<IQ", head[at:at + 12])
    new = template.encode()
    assert kind == 8 and len(new) <= n, (kind, n)  # a string at least as long
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(at + 12)
        f.write(new.ljust(n, b" "))
    return str(dst)


BAD_TEMPLATES = {
    "syntax": ("{% for m in messages %}{{ m.content }", "has a syntax error (line 1: "
               "unexpected '}')"),
    "sandbox": ("{{ ''.__class__.__mro__ }}", "does something rmjudge's template sandbox blocks "
                "(access to attribute '__class__' of 'str' object is unsafe)"),
}


@pytest.mark.model
@pytest.mark.parametrize("kind", list(BAD_TEMPLATES))
def test_a_gguf_chat_template_that_cannot_render_is_one_error_line(tmp_path, model_path, kind):
    template, why = BAD_TEMPLATES[kind]
    gguf = gguf_with_template(model_path, tmp_path / "judge.gguf", template)
    expected = (f"Error: the chat template of {gguf} (GGUF key tokenizer.chat_template) {why}; "
                "rmjudge cannot build prompts with it: use another GGUF of this judge, or "
                "replace the template (gguf-new-metadata IN.gguf OUT.gguf --chat-template-file "
                "FILE.jinja)\n")
    r = rmjudge("score", PAIRS, "--dry-run", "--model", gguf)
    assert (r.returncode, r.stderr) == (EXIT_USER, expected)
    out = tmp_path / "o.duckdb"
    r = rmjudge("score", PAIRS, "-o", out, "--model", gguf, "--samples", 1, "--max-tokens", 8,
                "--threads", 1)
    assert r.returncode == EXIT_USER
    assert r.stderr.splitlines()[-1] + "\n" == expected and "Traceback" not in r.stderr
    assert not out.exists()  # refused as the model loads, before the store is made


@pytest.mark.parametrize("kind", list(BAD_TEMPLATES))
def test_a_chat_template_file_that_cannot_render_is_refused_before_the_server(tmp_path, kind):
    template, why = BAD_TEMPLATES[kind]
    path = tmp_path / "judge.jinja"
    path.write_text(template)
    # port 9 (discard) is never contacted: the file is checked first
    r = rmjudge("score", PAIRS, "-o", tmp_path / "o.duckdb", "--server", "http://127.0.0.1:9/v1",
                "--chat-template", path)
    assert r.returncode == EXIT_USER
    assert r.stderr == (f"Error: --chat-template {path} {why}; fix the file, or leave "
                        "--chat-template out to use the server's template\n")


def test_template_failures_at_render_time_name_the_source():
    from rmjudge.engine.chat import ChatTemplate
    from rmjudge.prompts.sandbox import TemplateError
    from rmjudge.core.errors import UserError

    t = ChatTemplate("{% if messages[0]['content'] == 'boom' %}{{ 1 / 0 }}{% endif %}ok",
                     origin="the chat template of j.gguf", fix="use another GGUF")
    assert t.render([{"role": "user", "content": "fine"}]) == "ok"
    with pytest.raises(TemplateError) as exc:
        t.render([{"role": "user", "content": "boom"}])
    assert isinstance(exc.value, UserError)
    assert str(exc.value) == ("the chat template of j.gguf failed to render a prompt "
                              "(ZeroDivisionError: division by zero); use another GGUF")
    with pytest.raises(TemplateError, match="refused the prompt: no system role; use another"):
        ChatTemplate("{{ raise_exception('no system role') }}", origin="the chat template of "
                     "j.gguf", fix="use another GGUF")


# -- 15. the dry run's time estimate ----------------------------------------------------------

def estimate(r: subprocess.CompletedProcess) -> tuple[str, float, float]:
    """The estimate line, with its continuation lines (indented: wrapped to the width) joined
    back."""
    lines = r.stdout.splitlines()
    at = next(k for k, ln in enumerate(lines) if ln.startswith("estimated time:"))
    parts = [lines[at]]
    for ln in lines[at + 1:]:
        if not ln.startswith("  "):
            break
        parts.append(ln.strip())
    line = " ".join(parts)
    spans = re.findall(r"(?:(\d+)h(\d\d)m|(\d+)m(\d\d)s)", line)[:2]
    secs = [int(h or 0) * 3600 + int(m1 or 0) * 60 + int(m2 or 0) * 60 + int(s or 0)
            for h, m1, m2, s in spans]
    return line, secs[0], secs[1]


@pytest.mark.model
def test_dry_run_estimate_follows_the_current_max_tokens(tmp_path, model_path, monkeypatch):
    from rmjudge.runs.dryrun import record_throughput, throughput_key
    from rmjudge.models.checks import file_sha256

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no other run's figures

    key = throughput_key(file_sha256(model_path), "cpu1")
    # a finished run at --max-tokens 8: 100 generations of 8 tokens in 30 s, prompts included
    record_throughput(key, generated_tokens=800, generations=100, seconds=30.0, max_tokens=8)
    base = ["score", PAIRS, "--dry-run", "--model", model_path, "--threads", 1, "--samples", 4]
    r8 = rmjudge(*base, "--max-tokens", 8)
    assert r8.returncode == 0, r8.stderr
    line, lo8, hi8 = estimate(r8)
    # 5 pairs x 2 orders: 40 generations if unanimous, 70 with self-reflection, 0.3 s each
    assert (lo8, hi8) == (12, 21) and "(8 tokens per generation at --max-tokens 8)" in line
    r256 = rmjudge(*base, "--max-tokens", 256)
    line, lo, hi = estimate(r256)
    assert "no run at --max-tokens 256 measured yet" in line and "--max-tokens 8" in line
    assert lo == lo8 and hi == 32 * hi8  # up to 256/8 times as long per generation
    # once a run at 256 is recorded, its own figure is used
    record_throughput(key, generated_tokens=6000, generations=100, seconds=200.0, max_tokens=256)
    line, lo, hi = estimate(rmjudge(*base, "--max-tokens", 256))
    assert (lo, hi) == (80, 140) and "(60 tokens per generation at --max-tokens 256)" in line
    line, lo, hi = estimate(rmjudge(*base, "--max-tokens", 8))
    assert (lo, hi) == (12, 21)


def test_a_dry_run_of_a_shard_counts_that_shards_pairs(model_path):
    """Before, `--dry-run --shard I/N` estimated every pair of the input, not the shard's."""
    import re

    from click.testing import CliRunner

    from rmjudge.cli import main

    counts = []
    for shard in ("0/2", "1/2"):
        r = CliRunner().invoke(main, ["score", PAIRS, "--dry-run", "--shard", shard, "--model",
                                      model_path, "--threads", "1"])
        assert r.exit_code == 0, r.output
        counts.append(int(re.search(r"5 rows -> (\d+) pairs to judge", r.output).group(1)))
    assert sum(counts) == 5 and all(0 < c < 5 for c in counts), counts


def test_summaries_count_one_thing_in_the_singular(tmp_path):
    """Before, a one-pair run's summaries said "1 pairs", "1 errors", "1 runs"."""
    from rmjudge.core.words import count
    from rmjudge.runs.dryrun import DryRunReport

    assert [count(n, "pair") for n in (0, 1, 2)] == ["0 pairs", "1 pair", "2 pairs"]
    assert count(1, "batch", "batches") == "1 batch" and count(3, "batch", "batches") == "3 batches"
    assert DryRunReport(rows=1, pairs=1, errors=1).render().splitlines()[0] == \
        "dry run: 1 row -> 1 pair to judge, 1 error row"
    src = write_jsonl(tmp_path / "one.jsonl", [good(1), {"prompt": "no responses"}])
    out = str(tmp_path / "one.duckdb")
    score(src, ScriptedEngine(length_judge), JudgeSettings(samples=2, seed=1), output=out)
    merged = str(tmp_path / "merged.duckdb")
    r = CliRunner().invoke(main, ["merge", out, "-o", merged],
                           env={"COLUMNS": "1000"})  # whole lines (80: test_output_width.py)
    assert r.exit_code == 0, r.output
    assert f"  {out}: 1 pair, 1 error, 1 run [" in r.output, r.output
    assert re.search(rf"  -> {re.escape(merged)}: 1 pair, 1 error, \d+ samples, 1 run\n",
                     r.output), r.output
    assert "rmjudge merge: 1 shard\n" in r.output


def test_a_run_whose_thread_count_changed_records_no_throughput(tmp_path, monkeypatch):
    """Before, a run whose thread count followed the load (2 -> 1 threads) filed its figure
    under the last count (cpu1), so the next dry run at one thread estimated from a run that
    mostly used two."""
    from types import SimpleNamespace

    from rmjudge.engine.llama import LlamaEngine
    from rmjudge.runs.dryrun import measured_throughput, record_engine_throughput, throughput_key

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def engine(counts, threads):
        state = SimpleNamespace(on_gpu=False, threads=threads, thread_counts=set(counts))
        return SimpleNamespace(throughput_device=LlamaEngine.throughput_device.fget(state),
                               generated_tokens=800, info=SimpleNamespace(sha256="abc"))

    assert engine({2, 1}, 1).throughput_device is None
    record_engine_throughput(engine({2, 1}, 1), 100, 30.0, 8)
    assert measured_throughput(throughput_key("abc", "cpu1")) is None
    assert measured_throughput(throughput_key("abc", "cpu2")) is None
    record_engine_throughput(engine({2}, 2), 100, 30.0, 8)  # one count throughout: recorded
    got = measured_throughput(throughput_key("abc", "cpu2"))
    assert got["budgets"]["8"] == {"seconds_per_generation": 0.3, "tokens_per_generation": 8.0}
    server = SimpleNamespace(throughput_device=None, generated_tokens=800,
                             info=SimpleNamespace(sha256="abc"))
    record_engine_throughput(server, 100, 1.0, 16)  # a server: never recorded
    assert "16" not in measured_throughput(throughput_key("abc", "cpu2"))["budgets"]
