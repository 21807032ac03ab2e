"""The batched llama.cpp engine (scheduler and sampler), on llama-cpp-python's low-level API.

One context, many sequences, each in its own KV stream (`kv_unified=False`). Every step runs
one `llama_decode` with the next token of each decoding sequence, then the prompt chunks of
sequences that are prefilling (chunks of equal length share a call). Requests are scheduled
in *groups* that share a prompt prefix:

- the N samples of one request (identical prompts) and the requests with the same `share_key`
  (the N-1 reflections of a pair and order) form a group; its common token prefix is evaluated
  once on the group's first sequence and copied to the others' streams with
  `llama_memory_seq_cp`;
- a group's evaluated prefix is saved in the prefix cache (`rmjudge.engine.prefix_cache`), and
  a group or lone sequence that starts later restores the longest cached match of its prompt
  instead of evaluating it: a pair-order's reflections open with its rollout prompt's text;
- a group admitted while another group is still evaluating the same opening (the two orders
  of a pair, a prompt's comparisons in `rmjudge rank`) waits for it and copies its cells
  instead of evaluating them beside it (`_follow`);
- each sequence then feeds its own suffix and decodes; finished sequences free their slot,
  and the next group is admitted as soon as slots allow (continuous batching across pairs, in
  request order);
- sampling runs on the logits buffer row by row: log-softmax, then inverse-CDF sampling with a
  per-sample generator seeded from (request seed, sample index); the log-probability of every
  sampled token under the model's distribution is kept for the anchor confidence;
- a generation that ends without a parseable verdict gets its `ForceSpec` continuation fed on
  the same sequence, and the probabilities of the two choices are read from the logits
  (forced verdict) without re-evaluating the prompt.

A sequence's numbers depend on its own tokens only, never on what shares its decode calls,
so samples are reproducible across `--parallel`, `--batch-size`, `--threads`, shards and
resumes (docs/engine.md explains how). Model loading, metadata and the tokenizer live in
`rmjudge.engine.vocab`.
"""

from __future__ import annotations

import ctypes
import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from rmjudge.engine.base import Engine, RequestSource
from rmjudge.engine.cpu_load import LoadFollower, default_threads
from rmjudge.engine.forcing import force_plan, forced_probs
from rmjudge.engine.prefix_cache import PrefixCache
from rmjudge.engine.vocab import (Tokenizer, common_prefix, context_limit, count_tokens,
                                  device_name, load_model, model_info, read_model_info, uses_gpu)
from rmjudge.models.llamacpp import llama_backend
from rmjudge.core.errors import ModelError
from rmjudge.models.checks import check_gguf
from rmjudge.models.resolve import local_model
from rmjudge.engine.budget import FORCE_MARGIN  # noqa: F401 - the KV margin of every sequence
from rmjudge.engine.budget import prompt_room, tokens_needed, too_long_reason
from rmjudge.core.settings import EngineSettings, JudgeSettings
from rmjudge.core.types import Generation, GenRequest

__all__ = ["LlamaEngine", "device_name", "read_model_info"]  # the last two: from vocab


# -- scheduling structures ------------------------------------------------------------------

MIN_CHUNK = 2  # a prompt token is never evaluated as the only token of its sequence's chunk
CELL_PAD = 256  # llama.cpp pads each sequence's KV stream to this many cells
MIN_REUSE = 16  # shortest cached prefix worth restoring (and saving)


@dataclass
class _Seq:
    sample: int
    req: GenRequest
    feed: list[int]  # tokens still to evaluate for this sequence
    pos: int  # next position
    rng: np.random.Generator | None
    slot: int = -1
    phase: str = "wait"  # wait (for the group prefix) | feed | decode | force | done
    out: bytearray = field(default_factory=bytearray)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # len(out) after each token
    finish: str = "length"
    force_choices: tuple[int, int] | None = None
    forced: tuple[float, float] | None = None
    forced_lp: float | None = None
    error: str | None = None
    need: int = 0  # KV cells: prompt + max_tokens + forced-verdict margin
    job: "_Job | None" = None


@dataclass
class _Job:
    """One request's sequences; reported to the source when the last of them is done."""

    req: GenRequest
    seqs: list[_Seq]
    left: int


class _ListSource:
    """A fixed list of requests taken at once, the results stored by request position."""

    def __init__(self, requests: list[GenRequest], results: list):
        self.requests = requests
        self.results = results
        self.index = {id(r): [] for r in requests}
        for i, r in enumerate(requests):
            self.index[id(r)].append(i)

    def take(self) -> list[GenRequest]:
        out, self.requests = self.requests, []
        return out

    def done(self, request: GenRequest, generations: list[Generation]) -> None:
        self.results[self.index[id(request)].pop(0)] = generations


@dataclass
class _Group:
    prefix: list[int]
    seqs: list[_Seq]
    fed: int = 0  # prefix tokens evaluated so far (on the first sequence's slot)
    owner: int = -1
    source: "_Group | None" = None  # a group still evaluating this one's opening: wait for it
    share: int = 0  # prefix tokens to copy from `source` once it has evaluated them
    copied_at: int = -1  # the engine's decode-call count when its own opening was copied


@dataclass
class _Schedule:
    """What `steps` is serving: groups waiting for slots, groups evaluating their shared prefix,
    and the sequences that feed or decode on their own."""

    free_slots: list[int]  # lowest first
    queue: deque[_Group] = field(default_factory=deque)
    queued: int = 0  # sequences waiting in `queue`
    prefilling: list[_Group] = field(default_factory=list)
    live: list[_Seq] = field(default_factory=list)


def _take(remaining: int, budget: int) -> int:
    """How many of a sequence's `remaining` prompt tokens to evaluate now, within `budget`:
    never leave a single token for a later chunk, and never start a chunk of one token unless
    the whole feed is one token (a forced-verdict continuation can be). Chunks of two or more
    tokens of a sequence give the same numbers wherever they are cut (see docs/engine.md)."""
    t = min(remaining, budget)
    if t < remaining and remaining - t < MIN_CHUNK:
        t = remaining - MIN_CHUNK
    if t < MIN_CHUNK and t < remaining:
        return 0
    return t


class LlamaEngine(Engine):
    """Batched multi-sequence engine (see module docstring)."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        path = local_model(settings)
        llama_cpp = llama_backend()
        self.l = llama_cpp
        self.on_gpu = uses_gpu(settings)
        ngl = settings.n_gpu_layers if settings.n_gpu_layers is not None else (
            999 if self.on_gpu else 0)
        if settings.lora:
            check_gguf(settings.lora, what="LoRA adapter")
        self.model = load_model(path, vocab_only=False, n_gpu_layers=ngl)
        self.info = model_info(self.model, path, settings.lora, settings.lora_scale)
        self.tok = Tokenizer(llama_cpp, self.model, self.info)
        self.parallel = settings.parallel or (64 if self.on_gpu else 16)
        self.n_seq_ctx = context_limit(settings, self.info)
        self.ctx = None
        self.stream_size = 0  # KV cells of each sequence's stream in the current context
        self._batch = None
        self._batch_cap = 0
        self._lora = None
        self._generated = 0
        self.prompt_tokens_evaluated = 0  # prefill work, for profiles and benchmarks
        self.prompt_tokens_reused = 0  # prompt tokens restored from the prefix cache instead
        self.prompt_tokens_copied = 0  # ... or copied from a group evaluating them at the time
        # A group admitted while another group is still evaluating the same opening waits for
        # it and copies its cells (`_follow`); False evaluates the opening twice (benchmarks).
        self.share_prefill = True
        self._decode_calls = 0  # llama_decode calls; a stream copy is applied by the next one
        self._copy_call = -1  # `_decode_calls` when the last stream copy was asked for
        self.contexts_made = 0  # contexts made, and sequences moved into a larger one running
        self.sequences_moved = 0
        self.prefix_cache = PrefixCache(settings.prefix_cache_mb << 20)
        self.decode_steps = 0  # decode calls, and the sequences they carried (batch occupancy)
        self.decode_rows = 0
        self.threads = settings.threads or default_threads()
        self.thread_counts = {self.threads}  # every count the run decoded with (load follower)
        # without --threads, the thread count follows the load while the run goes (CPU only)
        self.load_follower = None if settings.threads or self.on_gpu else LoadFollower(self.threads)
        if settings.lora:
            self._lora = llama_cpp.llama_adapter_lora_init(self.model, settings.lora.encode())
            if not self._lora:
                raise ModelError(f"llama.cpp could not load the LoRA adapter {settings.lora} "
                                 "(corrupt, or made for another base model)")

    # -- Engine protocol -----------------------------------------------------------------
    @property
    def generated_tokens(self) -> int:
        return self._generated

    @property
    def throughput_device(self) -> str | None:
        """`cpuN` or `cuda`; None once the load follower changed the thread count (the run's
        figure then belongs to no one count)."""
        return None if len(self.thread_counts) > 1 else device_name(self)

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        per_pair = settings.samples * len(settings.order_list)
        return max(2, math.ceil(2 * self.parallel / per_pair))

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return count_tokens(self.tok, requests, self.n_seq_ctx)

    # -- context -------------------------------------------------------------------------
    def _ensure_context(self, need: int) -> None:
        """One KV stream per sequence slot (`kv_unified=False`), each large enough for the
        longest sequence at hand. A sequence's cells then sit at the same places whatever else
        runs, which keeps its numbers independent of the batch. The context is recreated,
        larger, only when a longer sequence comes (see `steps` and `_regrow`)."""
        stream = int(math.ceil(max(need, CELL_PAD) / CELL_PAD) * CELL_PAD)
        if self.ctx is not None and stream <= self.stream_size:
            return
        l = self.l
        if self.ctx is not None:
            l.llama_free(self.ctx)
            self.ctx = None
        cap = max(self.settings.batch_size, self.parallel)
        p = l.llama_context_default_params()
        p.n_ctx = stream * self.parallel
        p.n_batch = cap
        p.n_ubatch = cap
        p.n_seq_max = self.parallel
        p.n_threads = self.threads
        p.n_threads_batch = self.threads
        p.kv_unified = False
        if not self.on_gpu and hasattr(p, "flash_attn_type"):
            # On CPU, llama.cpp's flash attention accumulates in half precision: log-probs move
            # by up to 0.2 nats against llama.cpp's reference path. Off, they match it.
            p.flash_attn_type = l.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if hasattr(p, "no_perf"):
            p.no_perf = True
        self.ctx = l.llama_init_from_model(self.model, p)
        if not self.ctx:
            raise ModelError(f"llama.cpp could not create a context of {self.parallel} x {stream} "
                             "tokens; lower --parallel or --ctx-size")
        self.stream_size = stream
        self.contexts_made += 1
        self.mem = l.llama_get_memory(self.ctx)
        if self._lora:
            if hasattr(l, "llama_set_adapters_lora"):
                handles = (l.llama_adapter_lora_p_ctypes * 1)(self._lora) if hasattr(
                    l, "llama_adapter_lora_p_ctypes") else (ctypes.c_void_p * 1)(self._lora)
                scales = (ctypes.c_float * 1)(self.settings.lora_scale)
                rc = l.llama_set_adapters_lora(self.ctx, handles, 1, scales)
            else:
                rc = l.llama_set_adapter_lora(self.ctx, self._lora, self.settings.lora_scale)
            if rc != 0:
                raise ModelError(f"llama.cpp could not apply the LoRA adapter {self.settings.lora}")
        if self._batch is None or self._batch_cap < cap:
            if self._batch is not None:
                l.llama_batch_free(self._batch)
            self._batch = l.llama_batch_init(cap, 0, 1)
            self._batch_cap = cap
        self.n_vocab = self.tok.n_vocab

    def _regrow(self, run: _Schedule, need: int) -> bool:
        """Make the context again with streams of `need` cells while sequences run: the cells
        of every stream in use are saved (`llama_state_seq_get_data`, as the prefix cache
        saves a prefix), the context is made anew and each stream's cells are restored into
        the same slot. They are the same bytes at the same positions, so no sample changes
        (docs/engine.md, "Restored prefixes"), and the batch keeps running instead of draining
        to empty first (measured on a 360M shape, 8 pairs: about 60 decode steps at 6 of 16
        sequences; docs/speed.md). Holds the saved cells in memory meanwhile (at most the old
        context's). False, with nothing changed, while a stream copy is pending (llama.cpp
        applies it at the next decode call)."""
        if self._copy_call >= self._decode_calls:
            return False
        l = self.l
        saved = []
        for slot in sorted(set(range(self.parallel)) - set(run.free_slots)):
            if l.llama_memory_seq_pos_max(self.mem, slot) < 0:
                continue  # nothing in this stream yet
            size = l.llama_state_seq_get_size(self.ctx, slot)
            buf = (ctypes.c_uint8 * size)()
            if l.llama_state_seq_get_data(self.ctx, buf, size, slot) != size:
                return False
            saved.append((slot, buf))
        self._ensure_context(need)
        for slot, buf in saved:
            if l.llama_state_seq_set_data(self.ctx, buf, len(buf), slot) == 0:
                raise ModelError("llama.cpp could not restore a running sequence's cells into a "
                                 "larger context; lower --parallel or set --ctx-size")
        self.sequences_moved += len(saved)
        return True

    # -- planning ------------------------------------------------------------------------
    def _plan(self, requests: list[GenRequest]) -> tuple[list[_Group], list[list[_Seq]]]:
        """Tokenize, group by shared prefix, and check every sequence fits the context.

        A group is every sequence with the same `share_key` (or of the same request); its
        shared prefix is their longest common prefix less `MIN_CHUNK` tokens, so each sequence
        evaluates at least two tokens of its own. Groups larger than `--parallel` run in
        several waves, each evaluating the same prefix: the numbers do not depend on
        `--parallel`."""
        per_req: list[list[_Seq]] = []
        keyed: dict[Any, list[tuple[list[int], _Seq]]] = {}
        order: list[Any] = []
        for i, req in enumerate(requests):
            toks, error = self._prompt_or_error(req)
            seqs = []
            for s in range(req.n):
                rng = None if req.temperature <= 0 else np.random.default_rng([req.seed & (2**63 - 1), s])
                seq = _Seq(s, req, feed=list(toks), pos=0, rng=rng)
                seq.need = tokens_needed(len(toks), req.max_tokens)
                if error:
                    seq.error = error
                    seq.phase = "done"
                    seq.finish = "error"
                seqs.append(seq)
            per_req.append(seqs)
            key = req.share_key if req.share_key is not None else ("__req", i)
            if key not in keyed:
                keyed[key] = []
                order.append(key)
            keyed[key].extend((toks, s) for s in seqs if s.error is None)
        groups: list[_Group] = []
        for key in order:
            members = keyed[key]
            if not members:
                continue
            lcp = common_prefix([t for t, _ in members]) - MIN_CHUNK if len(members) > 1 else 0
            if lcp < MIN_CHUNK:
                lcp = 0
            for start in range(0, len(members), self.parallel):
                chunk = members[start:start + self.parallel]
                shared = lcp if len(chunk) > 1 else 0
                for toks, s in chunk:
                    s.feed = toks[shared:]
                    s.pos = shared
                groups.append(_Group(chunk[0][0][:shared], [s for _, s in chunk]))
        return groups, per_req

    def _too_long(self, n: str, req: GenRequest) -> str:
        return too_long_reason(n, req.max_tokens, self.n_seq_ctx)

    def _prompt_or_error(self, req: GenRequest) -> tuple[list[int], str | None]:
        """The prompt's tokens, or an error when it cannot fit the context. A prompt whose
        length alone proves it too long is rejected before it is tokenized, so a huge row
        costs no memory. That bound (the text's characters over the longest token's bytes)
        never exceeds the characters, so it is computed only for a text with more characters
        than the room: finding the longest token reads the whole vocabulary (an engine's first
        request on SmolLM2's 49,152 tokens: 0.55 s of CPU instead of 0.61, measured)."""
        room = prompt_room(self.n_seq_ctx, req.max_tokens)
        chars = sum(len(m["content"]) for m in req.messages) + len(req.assistant_prefix)
        bound = self.tok.min_prompt_tokens(req) if chars > room else 0
        if bound > room:
            return [], self._too_long(f"at least {bound}", req)
        toks = self.tok.prompt_tokens(req)
        if len(toks) > room:
            return [], self._too_long(str(len(toks)), req)
        return toks, None

    # -- generation ----------------------------------------------------------------------
    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        results: list[list[Generation] | None] = [None] * len(requests)
        for _ in self.steps(_ListSource(requests, results)):
            pass
        return results  # type: ignore[return-value]

    def _generations(self, seqs: list[_Seq]) -> list[Generation]:
        gens = []
        for s in seqs:
            if s.error:
                gens.append(Generation("", [], "error", error=s.error))
                continue
            raw = bytes(s.out)
            text = raw.decode("utf-8", errors="replace")
            gens.append(Generation(
                text=text, token_logprobs=s.logprobs, finish_reason=s.finish,
                forced_probs=s.forced, forced_logprob=s.forced_lp,
                token_ends=_token_ends(raw, text, s.ends)))
            self._generated += len(s.logprobs)
        return gens

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """One `llama_decode` over (token, position, slot, wants logits) items."""
        batch = self._batch
        for i, (token, pos, slot, logits) in enumerate(items):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = slot
            batch.logits[i] = logits
        batch.n_tokens = len(items)
        if self.load_follower is not None and (n := self.load_follower.check()) is not None:
            self.threads = n
            self.thread_counts.add(n)
            self.l.llama_set_n_threads(self.ctx, n, n)
        self._decode_calls += 1
        rc = self.l.llama_decode(self.ctx, batch)
        if rc != 0:
            raise ModelError(f"llama_decode failed (code {rc}); lower --parallel or --batch-size")

    def steps(self, source: RequestSource) -> Iterator[None]:
        """Serve `source` continuously until it has nothing left and every sequence is done;
        yields after each step.

        Whenever fewer sequences wait than there are slots, more requests are taken from the
        source, so a pair's next stage (reported `done` the moment its last sequence ends)
        joins the running batch at once instead of waiting for a whole call to drain. Groups
        are admitted in order while enough slots are free (lowest slots first, so live slots
        stay contiguous: llama.cpp splits a decode call at gaps in the sequence ids).

        Each step makes one decode call with the next token of every decoding sequence (in
        slot order, one token each), then prompt chunks within `--batch-size` tokens, chunks
        of equal length sharing a call. A sequence's tokens are thus always evaluated in the
        same shapes, whatever shares the step: one at a time while decoding, its prompt in
        chunks of two tokens or more.

        The KV streams are sized for the longest sequence waiting when the context is made;
        when a longer one comes, the context is made again, larger (with a quarter of
        headroom, so that this stays rare), and the running sequences' cells move into it
        (`_regrow`).

        A step runs the phases in this order: `_refill` (take requests), `_admit` (groups into
        free slots), `_decode_step`, `_prefill` (prompt chunks; finished group prefixes copied
        to their sequences), `_retire` (finished sequences free their slots and report)."""
        run = _Schedule(free_slots=list(range(self.parallel)))
        try:
            while True:
                self._refill(source, run)
                if not (run.queue or run.live or run.prefilling):
                    return
                self._admit(run)
                self._decode_step(run)
                self._prefill(run)
                self._retire(source, run)
                yield
        finally:
            self._release(run)

    def _refill(self, source: RequestSource, run: _Schedule) -> None:
        """Take requests while fewer sequences wait than there are slots (`done` calls make the
        source ready again); a request whose sequences all failed is reported at once."""
        while run.queued < self.parallel:
            requests = source.take()
            if not requests:
                break
            groups, per_req = self._plan(requests)
            for req, seqs in zip(requests, per_req):
                job = _Job(req, seqs, sum(s.error is None for s in seqs))
                for s in seqs:
                    s.job = job
                if job.left == 0:  # nothing to run (errors only)
                    source.done(req, self._generations(seqs))
            run.queue.extend(groups)
            run.queued += sum(len(g.seqs) for g in groups)

    def _admit(self, run: _Schedule) -> None:
        """Give the queued groups, in order, their slots while enough are free; make the context
        (again, larger, the running sequences moved into it) first when a group needs longer
        streams. A group with
        a shared prefix starts prefilling it (from the prefix cache when it can); the sequences
        of a group without one restore what they can of their own prompt and start feeding."""
        while run.queue and len(run.free_slots) >= len(run.queue[0].seqs):
            g = run.queue[0]
            need = max(s.need for s in g.seqs)
            if self.ctx is None or need > self.stream_size:
                longest = max(s.need for q in run.queue for s in q.seqs)
                grown = self.stream_size + self.stream_size // 4 if self.ctx else 0
                target = max(longest, min(grown, self.n_seq_ctx))
                if run.live or run.prefilling:
                    if not self._regrow(run, target):
                        break  # a stream copy is pending: the next step grows it
                else:
                    self._ensure_context(target)
            run.queue.popleft()
            run.queued -= len(g.seqs)
            for s in g.seqs:
                s.slot = heapq.heappop(run.free_slots)
            g.owner = g.seqs[0].slot
            if g.prefix:
                if not self._follow(g, run):
                    g.fed = self._restore(g.owner, g.prefix, len(g.prefix))
                run.prefilling.append(g)
            else:
                for s in g.seqs:
                    reused = self._restore(s.slot, s.feed, len(s.feed) - MIN_CHUNK)
                    s.pos += reused
                    s.feed = s.feed[reused:]
                    s.phase = "feed"
                    run.live.append(s)

    def _decode_step(self, run: _Schedule) -> None:
        """One decode call with the next token of every decoding sequence (slot order), then
        their next tokens sampled."""
        decoding = sorted((s for s in run.live if s.phase == "decode"), key=lambda s: s.slot)
        if not decoding:
            return
        self._decode([(s.feed[0], s.pos, s.slot, True) for s in decoding])
        self.decode_steps += 1
        self.decode_rows += len(decoding)
        for s in decoding:
            s.feed = []
            s.pos += 1
        self._sample(decoding)

    def _prefill(self, run: _Schedule) -> None:
        """Prompt chunks within `--batch-size` tokens: group prefixes first, then the sequences'
        own prompts and forced-verdict continuations. Chunks of equal length share a call (slot
        order), which llama.cpp evaluates as one ubatch without re-cutting them. A group whose
        prefix is complete is saved in the prefix cache and copied to its sequences' streams."""
        budget = self.settings.batch_size
        work: list[tuple[int, int, int, _Group | None, _Seq | None]] = []
        for g in run.prefilling:
            if g.source is not None:
                continue  # waits for the group evaluating its opening (`_follow`)
            take = _take(len(g.prefix) - g.fed, budget)
            if take:
                work.append((take, g.owner, g.fed, g, None))
                budget -= take
        for s in run.live:
            if s.phase in ("feed", "force") and s.feed:
                take = _take(len(s.feed), budget)
                if take:
                    work.append((take, s.slot, s.pos, None, s))
                    budget -= take
        for length in sorted({w[0] for w in work}):
            items, sampled = [], []
            for take, slot, pos, g, s in sorted((w for w in work if w[0] == length),
                                                key=lambda w: w[1]):
                if g is not None:
                    items += [(g.prefix[pos + j], pos + j, slot, False) for j in range(take)]
                    g.fed += take
                else:
                    last = take == len(s.feed)
                    items += [(s.feed[j], pos + j, slot, last and j == take - 1)
                              for j in range(take)]
                    s.pos += take
                    s.feed = s.feed[take:]
                    if last:
                        sampled.append(s)
            self._decode(items)
            self.prompt_tokens_evaluated += len(items)
            if sampled:
                self._sample(sampled)
        ready = [g for g in run.prefilling if g.source is not None and self._can_copy(g)]
        for g in ready:  # before any finished source leaves `prefilling`
            self._copy_opening(g)
        still = []
        for g in run.prefilling:
            if g.fed == len(g.prefix):
                self._save(g.owner, g.prefix)
                for s in g.seqs:  # copied before the next decode call evaluates anything
                    if s.slot != g.owner:
                        self.l.llama_memory_seq_cp(self.mem, g.owner, s.slot, -1, -1)
                        self._copy_call = self._decode_calls
                    s.phase = "feed"
                    run.live.append(s)
            else:
                still.append(g)
        run.prefilling = still

    def _retire(self, source: RequestSource, run: _Schedule) -> None:
        """Free the slots of finished sequences; a request whose last sequence finished is
        reported to the source."""
        keep = []
        for s in run.live:
            if s.phase == "done":
                self.l.llama_memory_seq_rm(self.mem, s.slot, -1, -1)
                heapq.heappush(run.free_slots, s.slot)
                s.job.left -= 1
                if s.job.left == 0:
                    source.done(s.job.req, self._generations(s.job.seqs))
            else:
                keep.append(s)
        run.live = keep

    def _release(self, run: _Schedule) -> None:
        """A consumer that stops early (an error, Ctrl-C, a closed generator) leaves no
        sequence's cells behind for the next call."""
        for s in run.live:
            self.l.llama_memory_seq_rm(self.mem, s.slot, -1, -1)
        for g in run.prefilling:
            for s in g.seqs:
                self.l.llama_memory_seq_rm(self.mem, s.slot, -1, -1)

    # -- prefixes shared in flight ------------------------------------------------------
    def _follow(self, g: _Group, run: _Schedule) -> bool:
        """Whether `g` waits for a group that is evaluating the same opening right now (the
        comparisons of one prompt admitted together: the prompt, and often their first
        response). It then copies that group's cells (`_copy_opening`) instead of evaluating
        them a second time beside it. Only worth it when the copy covers at least `MIN_REUSE`
        tokens more than the prefix cache holds; the copy always leaves `g` at least one chunk
        of its own to evaluate, so its sequences are copied from cells it completed itself."""
        if not self.share_prefill or not run.prefilling:
            return False
        limit = len(g.prefix) - MIN_CHUNK
        cached = self.prefix_cache.lookup(g.prefix, limit)[1] if self.prefix_cache.budget else 0
        best, best_m = None, 0
        for h in run.prefilling:
            m = min(common_prefix([g.prefix, h.prefix]), limit)
            if m > best_m:
                best, best_m = h, m
        if best is None or best_m < max(MIN_REUSE, cached + MIN_REUSE):
            return False
        g.source, g.share = best, best_m
        return True

    def _can_copy(self, g: _Group) -> bool:
        """`g.source` has evaluated `g.share` tokens, and no copy into its own stream is still
        pending (llama.cpp applies stream copies at the next decode call)."""
        src = g.source
        return (src is not None and src.source is None and src.fed >= g.share
                and src.copied_at < self._decode_calls)

    def _copy_opening(self, g: _Group) -> None:
        """`g` takes the first `g.share` cells of `g.source`'s stream (a whole-stream copy, the
        rest then dropped): they hold the numbers evaluating those tokens at those positions
        gives, whichever chunks did it (docs/engine.md), so `g`'s samples are unchanged."""
        l = self.l
        l.llama_memory_seq_rm(self.mem, g.owner, -1, -1)
        l.llama_memory_seq_cp(self.mem, g.source.owner, g.owner, -1, -1)
        self._copy_call = self._decode_calls
        l.llama_memory_seq_rm(self.mem, g.owner, g.share, -1)
        g.fed = g.share
        g.copied_at = self._decode_calls
        self.prompt_tokens_copied += g.share
        g.source = None

    # -- prefix cache --------------------------------------------------------------------
    def _restore(self, slot: int, tokens: list[int], limit: int) -> int:
        """Restore into `slot`'s (empty) stream the longest cached prefix of `tokens`, at most
        `limit` tokens and never leaving a single token to evaluate; returns its length (0:
        nothing restored, the stream is still empty)."""
        if len(tokens) < MIN_REUSE or limit < MIN_REUSE:
            return 0
        entry, m = self.prefix_cache.lookup(tokens, limit)
        if 0 < len(tokens) - m < MIN_CHUNK:
            m = len(tokens) - MIN_CHUNK
        if entry is None or m < MIN_REUSE:
            return 0
        l = self.l
        if l.llama_state_seq_set_data(self.ctx, entry.state, len(entry.state), slot) == 0:
            l.llama_memory_seq_rm(self.mem, slot, -1, -1)
            return 0
        l.llama_memory_seq_rm(self.mem, slot, m, -1)
        self.prompt_tokens_reused += m
        self.prefix_cache.hits += 1
        return m

    def _save(self, slot: int, tokens: list[int]) -> None:
        """Keep the cells of a group's evaluated prefix (all that `slot` holds) for later
        stages: a pair-order's reflections open with its rollout prompt's text."""
        cache = self.prefix_cache
        if cache.budget <= 0 or len(tokens) < MIN_REUSE or cache.covers(tokens):
            return
        l = self.l
        size = l.llama_state_seq_get_size(self.ctx, slot)
        if size <= 0 or size > cache.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        if l.llama_state_seq_get_data(self.ctx, buf, size, slot) == size:
            cache.add(tokens, buf)

    def _sample(self, outputs: list[_Seq]) -> None:
        """Sample (or read forced choices) for every sequence that produced logits in the last
        decode call, one row at a time so a row's numbers never depend on the other rows.

        exp of the shifted logits gives both the normalizer (log-probs under the model's
        distribution at temperature 1) and, unnormalized, the sampling weights at temperature
        1, so no row is exponentiated twice.
        """
        ptr = self.l.llama_get_logits(self.ctx)
        V = self.n_vocab
        logits = np.ctypeslib.as_array(ptr, shape=(len(outputs) * V,)).reshape(len(outputs), V)
        for row, s in enumerate(outputs):
            shifted = logits[row] - logits[row].max()
            weights = np.exp(shifted)
            lse = float(np.log(weights.sum()))
            if s.phase == "force":
                c1, c2 = s.force_choices  # type: ignore[misc]
                s.forced, s.forced_lp = forced_probs(float(shifted[c1]) - lse,
                                                     float(shifted[c2]) - lse)
                s.phase = "done"
                continue
            tok = self._pick(shifted, weights, s)
            s.phase = "decode"
            if self.tok.is_eog(tok):
                s.finish = "stop"
                self._finish(s, feed_last=None)
                continue
            s.tokens.append(tok)
            s.logprobs.append(float(shifted[tok]) - lse)
            s.out += self.tok.piece_bytes(tok)
            s.ends.append(len(s.out))
            stop = _matched_stop(s.out, s.req.stop)
            if stop is not None:
                del s.out[stop:]
                s.finish = "stop"
                self._finish(s, feed_last=tok)
            elif len(s.tokens) >= s.req.max_tokens:
                s.finish = "length"
                self._finish(s, feed_last=tok)
            else:
                s.feed = [tok]

    @staticmethod
    def _pick(shifted: np.ndarray, weights: np.ndarray, s: _Seq) -> int:
        """Greedy, or inverse-CDF sampling with the sequence's own generator (top-p aware)."""
        req = s.req
        if s.rng is None or req.temperature <= 0:
            return int(shifted.argmax())
        p = weights if req.temperature == 1.0 else np.exp(shifted / req.temperature)
        u = s.rng.random()
        if req.top_p < 1.0:
            idx = np.argsort(-p, kind="stable")
            cs = np.cumsum(p[idx])
            cut = int(np.searchsorted(cs, req.top_p * cs[-1])) + 1
            keep = idx[:cut]
            cdf = cs[:cut]
            return int(keep[min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), cut - 1)])
        cdf = np.cumsum(p)
        return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)

    def _finish(self, s: _Seq, feed_last: int | None) -> None:
        """End a sequence, or continue it with a forced-verdict suffix when it does not parse."""
        force = s.req.force
        if force is not None:
            plan = force_plan(self.tok, force, s.out.decode("utf-8", errors="replace"))
            if plan is not None:
                feed, s.force_choices = plan
                s.feed = ([feed_last] if feed_last is not None else []) + feed
                s.phase = "force"
                return
        s.phase = "done"


def _token_ends(raw: bytes, text: str, ends: list[int]) -> list[int]:
    """Where each token ends in `text` (UTF-8 bytes of the decoded text, which replaced any
    invalid byte of `raw` by U+FFFD): the byte offsets themselves when `raw` was valid."""
    ends = [min(e, len(raw)) for e in ends]
    if text.encode() == raw:
        return ends
    return [len(raw[:e].decode("utf-8", errors="replace").encode()) for e in ends]


def _matched_stop(out: bytearray, stops: tuple[str, ...]) -> int | None:
    """End index (exclusive) of the text to keep when a stop string occurs, else None."""
    for stop in stops:
        b = stop.encode()
        i = out.find(b, max(0, len(out) - len(b) - 16))
        if i >= 0:
            return i + len(b)
    return None
