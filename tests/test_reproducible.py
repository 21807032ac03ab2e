"""Reproducible by construction: the batched engine gives byte-identical samples (texts,
predictions, confidences) for the same input, model, settings and seed, whatever
`--parallel`, `--batch-size`, `--threads`, the resume point or the `--shard` split.

Runs with tiny settings (2 pairs, N=2, 16 tokens) on the embedded model cut to two blocks
(`small_model_path`, tests/small_model.py): the same vocabulary, tensor shapes and kernels, so
the same engine code and llama.cpp paths, at a fraction of the compute.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import kill_after_commits, rows

from rmjudge.engine import load_engine
from rmjudge.engine.base import Engine
from rmjudge.runs.pipeline import score
from rmjudge.core.settings import EngineSettings, JudgeSettings

pytestmark = [pytest.mark.model, pytest.mark.slow]
DATA = Path(__file__).parent / "data"
# forced verdicts asked for: they are on by default only for the embedded demo judge, and every
# rollout here is cut at 16 tokens, so each sample's verdict is read from the logits
JS = dict(samples=2, max_tokens=16, seed=11, forced=True)
SAMPLES_Q = ('SELECT pair_id, "order", stage, idx, text, prediction, confidence, p_first, '
             "verdict_source, tokens, finish_reason FROM samples ORDER BY ALL")
PAIRS_Q = "SELECT id, verdict, verdict_ab, verdict_ba, p_a FROM pairs ORDER BY id"


def _rows_file(tmp_path, n: int) -> str:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join((DATA / "pandalm_5.jsonl").read_bytes().splitlines(True)[:n]))
    return str(path)


def _run(src, out, small_model_path, shard=None, **engine):
    es = EngineSettings(model=small_model_path, **{"threads": 1, **engine})
    score(src, load_engine(es), JudgeSettings(**JS), output=out, shard=shard)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_model_path):
    """One run with 16 parallel sequences: the samples every other run must reproduce."""
    tmp = tmp_path_factory.mktemp("repro")
    src = _rows_file(tmp, 2)
    out = _run(src, str(tmp / "ref.duckdb"), small_model_path, parallel=16)
    assert rows(out, "SELECT count(*) FROM samples")[0][0] >= 2 * 2 * 2
    # every rollout's verdict read from the logits: the comparisons cover the forced path too
    assert rows(out, """SELECT count(*) FROM samples WHERE stage = 'rollout'
                        AND (verdict_source IS DISTINCT FROM 'forced' OR p_first IS NULL)""") == [(0,)]
    return src, out


@pytest.mark.parametrize("engine", [dict(parallel=1), dict(parallel=4, batch_size=16, threads=2)],
                         ids=["parallel1", "parallel4-batch16-threads2"])
def test_parallel_batch_size_and_threads_do_not_change_samples(reference, small_model_path, tmp_path,
                                                                engine):
    src, ref = reference
    out = _run(src, str(tmp_path / "o.duckdb"), small_model_path, **engine)
    assert rows(out, SAMPLES_Q) == rows(ref, SAMPLES_Q)
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)


def test_threads_following_the_load_mid_run_change_no_sample(reference, small_model_path, tmp_path):
    # Without --threads the engine follows the load while it runs (LoadFollower): here it is
    # told to switch between 1 and 2 threads before every decode, and every sample is still
    # the reference's.
    src, ref = reference
    engine = load_engine(EngineSettings(model=small_model_path, parallel=16))
    assert engine.load_follower is not None
    flips = iter(lambda: 2 if engine.threads == 1 else 1, None)
    engine.load_follower.check = lambda: next(flips)
    out = str(tmp_path / "f.duckdb")
    score(src, engine, JudgeSettings(**JS), output=out)
    assert engine.decode_steps > 10 and engine.threads in (1, 2)
    assert rows(out, SAMPLES_Q) == rows(ref, SAMPLES_Q)
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)
    fixed = load_engine(EngineSettings(model=small_model_path, threads=1))
    assert fixed.load_follower is None  # --threads given: the count stays as asked


def test_two_shards_give_the_unsharded_samples(reference, small_model_path, tmp_path):
    src, ref = reference
    shards = [_run(src, str(tmp_path / f"s{i}.duckdb"), small_model_path, shard=(i, 2), parallel=4)
              for i in range(2)]
    got = sorted(r for s in shards for r in rows(s, SAMPLES_Q))
    assert got == rows(ref, SAMPLES_Q)
    assert sorted(r for s in shards for r in rows(s, PAIRS_Q)) == rows(ref, PAIRS_Q)


def test_kill_9_and_resume_gives_the_uninterrupted_samples(reference, small_model_path, tmp_path):
    src, ref = reference
    out = str(tmp_path / "k.duckdb")
    args = ["score", src, "-o", out, "--samples", "2", "--max-tokens", "16", "--seed", "11",
            "--commit-every", "1", "--quiet", "--model", small_model_path, "--threads", "1",
            "--forced", "--parallel", "8"]
    assert kill_after_commits(args, 1) == 1  # killed right after its first pair was stored
    assert rows(out, "SELECT count(*) FROM pairs") == [(1,)]
    cmd = [sys.executable, "-m", "rmjudge", *args]
    resumed = subprocess.run(cmd, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert rows(out, SAMPLES_Q) == rows(ref, SAMPLES_Q)
    assert rows(out, PAIRS_Q) == rows(ref, PAIRS_Q)


class ParsedRollouts(Engine):
    """The real engine, with each rollout's text closed by a verdict (1, 2, 1, ...) so that the
    rollouts take part and self-reflection runs: the embedded model never writes a verdict, and
    only rollouts with a verdict of their own are critiques (reflectrm.md §2). Reflections are
    the model's own generations."""

    def __init__(self, engine):
        self.engine = engine
        self.info = engine.info

    def preferred_pairs_in_flight(self, settings) -> int:
        return self.engine.preferred_pairs_in_flight(settings)

    @property
    def generated_tokens(self) -> int:
        return self.engine.generated_tokens

    def generate(self, requests):
        from rmjudge.prompts import completion_text

        out = self.engine.generate(requests)
        for req, gens in zip(requests, out):
            if req.share_key[2] == "rollout":
                for i, g in enumerate(gens):
                    g.text = completion_text("pref", g.text, 1 + i % 2)
                    g.finish_reason = "stop"
        return out


def test_prefix_cache_saves_the_reflections_prompt_work_and_changes_no_sample(small_model_path,
                                                                              tmp_path):
    # Reflections open with their rollout prompt's text, so the engine restores the rollout
    # prompt's saved cells instead of evaluating them again; a restored cell holds the numbers
    # evaluating it would give, so the samples are those of a run without the cache.
    src = _rows_file(tmp_path, 1)
    js = JudgeSettings(samples=3, max_tokens=16, seed=11, shortcut=False)  # reflections always
    outs, engines = [], []
    for mb in (256, 0):
        engine = load_engine(EngineSettings(model=small_model_path, threads=1, parallel=8,
                                            prefix_cache_mb=mb))
        out = str(tmp_path / f"c{mb}.duckdb")
        score(src, ParsedRollouts(engine), js, output=out)
        outs.append(out)
        engines.append(engine)
    on, off = engines
    # one pair: 2 orders x 2 reflections (each non-anchor of N=3 against the anchor)
    assert rows(outs[0], "SELECT count(*) FROM samples WHERE stage = 'reflection'")[0][0] == 2 * 2
    assert rows(outs[0], SAMPLES_Q) == rows(outs[1], SAMPLES_Q)
    assert rows(outs[0], PAIRS_Q) == rows(outs[1], PAIRS_Q)
    assert off.prompt_tokens_reused == 0
    # every reflection group restored its pair-order's rollout prompt (the conversation and
    # both responses: well over a hundred tokens each), and nothing was evaluated twice
    assert on.prefix_cache.hits >= 2
    assert on.prompt_tokens_reused > 2 * 100
    # (both engines also copy the opening the two orders share while it is being evaluated)
    assert (on.prompt_tokens_evaluated + on.prompt_tokens_reused + on.prompt_tokens_copied
            == off.prompt_tokens_evaluated + off.prompt_tokens_copied)


def test_groups_sharing_an_opening_in_flight_copy_it_and_change_no_sample(small_model_path):
    # The ordered comparisons of one prompt, admitted together: each pair-order's group waits
    # for the group already evaluating the same opening (the prompt, and the first response
    # when they share it) and copies its cells instead of evaluating them beside it. A copied
    # cell holds what evaluating it gives, so the samples are those of the engine without it.
    from rmjudge import prompts
    from rmjudge.core.types import GenRequest

    conv = [{"role": "user", "content": "Why is the sky blue, and why are sunsets red? " * 2}]
    cands = ["Rayleigh scattering favours short wavelengths. " * 2,
             "The sky reflects the ocean, which is blue. " * 2,
             "At sunset light crosses more air, so blue is scattered away. " * 2]
    reqs = [GenRequest(messages=prompts.pref_messages(conv, cands[a], cands[b], ""), n=2,
                       assistant_prefix=prompts.ASSISTANT_PREFIX, temperature=1.0,
                       seed=10 * a + b, max_tokens=4, share_key=(a, b))
            for a in range(3) for b in range(3) if a != b]
    runs = {}
    for share, mb in ((True, 0), (False, 0), (True, 256)):
        engine = load_engine(EngineSettings(model=small_model_path, threads=1, parallel=8,
                                            prefix_cache_mb=mb))
        engine.share_prefill = share
        gens = engine.generate(reqs)
        runs[share, mb] = engine, [[(g.text, g.token_logprobs, g.finish_reason) for g in gl]
                                   for gl in gens]
    (on, got), (off, want), (cached, with_cache) = runs.values()
    assert got == want == with_cache
    assert off.prompt_tokens_copied == 0 and on.prompt_tokens_copied > 60
    # nothing evaluated twice that the copies covered, nothing skipped
    assert on.prompt_tokens_evaluated + on.prompt_tokens_copied == off.prompt_tokens_evaluated
    assert cached.prompt_tokens_evaluated < on.prompt_tokens_evaluated


def test_rank_gives_the_same_comparisons_and_rankings_with_openings_shared_in_flight(
        small_model_path, tmp_path):
    # rank sends a prompt's comparisons together, so their groups share openings in flight;
    # copying them instead of evaluating them again changes no verdict and no ranking.
    import json

    from rmjudge.rank import rank

    src = tmp_path / "cands.jsonl"
    src.write_text(json.dumps({"id": "p1", "prompt": "Why is the sky blue? Explain briefly.",
                               "responses": ["Rayleigh scattering favours short wavelengths.",
                                             "The sky reflects the ocean.",
                                             "Air scatters blue light more than red light."]})
                   + "\n")
    stores, engines = [], []
    for share in (True, False):
        engine = load_engine(EngineSettings(model=small_model_path, threads=1, parallel=8))
        engine.share_prefill = share
        out = str(tmp_path / f"r{share}.duckdb")
        rank(str(src), out, engine=engine, judge=JudgeSettings(**JS), strategy="round-robin")
        stores.append(out)
        engines.append(engine)
    ranking_q = "SELECT * FROM rankings ORDER BY ALL"
    assert rows(stores[0], "SELECT count(*) FROM pairs")[0][0] == 3
    assert rows(stores[0], SAMPLES_Q) == rows(stores[1], SAMPLES_Q)
    assert rows(stores[0], PAIRS_Q) == rows(stores[1], PAIRS_Q)
    assert rows(stores[0], ranking_q) == rows(stores[1], ranking_q)
    assert engines[0].prompt_tokens_copied > 0 and engines[1].prompt_tokens_copied == 0
