"""Continuous batching for the batched llama.cpp engine.

Every step runs one `llama_decode` with the next token of each decoding sequence, then the
prompt chunks of sequences that are prefilling (chunks of equal length share a call). Requests
are scheduled in *groups* that share a prompt prefix (`rmjudge.engine.planner`):

- a group's common token prefix is evaluated once on the group's first sequence and copied
  to the others' streams with `llama_memory_seq_cp`;
- a group's evaluated prefix is saved in the prefix cache (`rmjudge.engine.prefix_cache`), and
  a group or lone sequence that starts later restores the longest cached match of its prompt
  instead of evaluating it: a pair-order's reflections open with its rollout prompt's text;
- a group admitted while another group is still evaluating the same opening (the two orders
  of a pair, a prompt's comparisons in `rmjudge rank`) waits for it and copies its cells
  instead of evaluating them beside it (`_follow`);
- each sequence then feeds its own suffix and decodes; finished sequences free their slot,
  and the next group is admitted as soon as slots allow (continuous batching across pairs, in
  request order);
- the decoding sequences are kept in consecutive slots (`_pack`): llama.cpp cuts a decode call
  wherever the slot ids skip one, and each piece reads all the weights again.

The context and its streams are `rmjudge.engine.kv_context`'s, the sampling
`rmjudge.engine.sampler`'s.
"""

from __future__ import annotations

import heapq
from collections import Counter
from itertools import pairwise
from typing import Iterator

from rmjudge.engine.base import RequestSource
from rmjudge.engine.kv_context import CELL_PAD, KVContext
from rmjudge.engine.planner import Planner
from rmjudge.engine.sampler import Sampler
from rmjudge.engine.sequences import MIN_CHUNK, MIN_REUSE, Group, Job, Schedule, Seq
from rmjudge.engine.vocab import common_prefix


# a decoding sequence moves to close a gap only with at least this many tokens left to decode
PACK_LEFT = 4


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


class Scheduler:
    """Serves request sources on one `KVContext` of `parallel` slots (see module docstring)."""

    def __init__(self, kv: KVContext, planner: Planner, sampler: Sampler, parallel: int,
                 n_seq_ctx: int, batch_size: int):
        self.kv = kv
        self.planner = planner
        self.sampler = sampler
        self.parallel = parallel
        self.n_seq_ctx = n_seq_ctx
        self.batch_size = batch_size
        self.prompt_tokens_evaluated = 0  # prefill work, for profiles and benchmarks
        self.prompt_tokens_copied = 0  # prompt tokens copied from a group evaluating them
        # A group admitted while another group is still evaluating the same opening waits for
        # it and copies its cells (`_follow`); False evaluates the opening twice (benchmarks).
        self.share_prefill = True
        # a group waited for slots beyond the context's streams: all `parallel` of them are made
        # as soon as no sequence runs (`_admit`)
        self.more_streams = False
        self.decode_steps = 0  # decode calls, and the sequences they carried (batch occupancy)
        self.decode_rows = 0
        # decode calls by (sequences, KV cells attended): llama.cpp attends every stream of a
        # call over the longest one's cells, padded to CELL_PAD (the width bound's steps)
        self.decode_spans: Counter[tuple[int, int]] = Counter()
        # decoding sequences moved into free slots so that a decode call's slots are
        # consecutive (`_pack`); False leaves them where they are (benchmarks, tests)
        self.pack = True
        self.sequences_packed = 0
        self.decode_pieces = 0  # the pieces llama.cpp cut the decode calls into (gaps + 1)

    @property
    def decode_widths(self) -> Counter[int]:
        """Decode calls by the sequences they carried."""
        widths: Counter[int] = Counter()
        for (w, _), n in self.decode_spans.items():
            widths[w] += n
        return widths

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

        The KV streams are sized for the longest sequence waiting when the context is made,
        and there are as many as the sequences waiting then can fill (up to `parallel`); when
        a longer one comes, the context is made again, larger (with a quarter of headroom, so
        that this stays rare), and the running sequences' cells move into it
        (`KVContext.regrow`). A group that needs more slots than the context has streams waits
        until the running sequences are done (cells cannot move between contexts of different
        stream counts), and the context is then made with all `parallel`, so this happens
        once.

        A step runs the phases in this order: `_refill` (take requests), `_admit` (groups into
        free slots), `_pack` (decoding sequences moved into consecutive slots), `_decode_step`,
        `_prefill` (prompt chunks; finished group prefixes copied to their sequences),
        `_retire` (finished sequences free their slots and report)."""
        run = Schedule(free_slots=list(range(self.parallel)))
        try:
            while True:
                self._refill(source, run)
                if not (run.queue or run.live or run.prefilling):
                    return
                self._admit(run)
                self._pack(run)
                self._decode_step(run)
                self._prefill(run)
                self._retire(source, run)
                yield
        finally:
            self._release(run)

    def _refill(self, source: RequestSource, run: Schedule) -> None:
        """Take requests while fewer sequences wait than there are slots (`done` calls make the
        source ready again); a request whose sequences all failed is reported at once."""
        while run.queued < self.parallel:
            requests = source.take()
            if not requests:
                break
            groups, per_req = self.planner.plan(requests)
            for req, seqs in zip(requests, per_req):
                job = Job(req, seqs, sum(s.error is None for s in seqs))
                for s in seqs:
                    s.job = job
                if job.left == 0:  # nothing to run (errors only)
                    source.done(req, self.sampler.generations(seqs))
            run.queue.extend(groups)
            run.queued += sum(len(g.seqs) for g in groups)

    def _admit(self, run: Schedule) -> None:
        """Give the queued groups, in order, their slots while enough are free; make the context
        (again, larger, the running sequences moved into it) first when a group needs longer
        streams. A group with
        a shared prefix starts prefilling it (from the prefix cache when it can); the sequences
        of a group without one restore what they can of their own prompt and start feeding."""
        kv = self.kv
        while run.queue and len(run.free_slots) >= len(run.queue[0].seqs):
            g = run.queue[0]
            need = max(s.need for s in g.seqs)
            top = heapq.nsmallest(len(g.seqs), run.free_slots)[-1] + 1  # streams its slots need
            busy = bool(run.live or run.prefilling)
            if kv.ctx is not None and top > kv.streams:
                self.more_streams = True
                if busy:  # more streams once the running sequences are done (`KVContext.ensure`)
                    break
            more = self.more_streams and not busy
            if kv.ctx is None or need > kv.stream_size or more:
                target = kv.stream_size
                if kv.ctx is None or need > kv.stream_size:
                    longest = max(s.need for q in run.queue for s in q.seqs)
                    grown = kv.stream_size + kv.stream_size // 4 if kv.ctx else 0
                    target = max(longest, min(grown, self.n_seq_ctx))
                if more:  # all `parallel` streams, so that this happens once
                    kv.ensure(target, self.parallel)
                    self.more_streams = False
                elif busy:
                    in_use = sorted(set(range(self.parallel)) - set(run.free_slots))
                    if not kv.regrow(target, in_use):
                        break  # a stream copy is pending: the next step grows it
                elif kv.ctx is None:  # the slots the sequences waiting now can fill
                    kv.ensure(target, max(top, run.queued))
                else:
                    kv.ensure(target, kv.streams)
            run.queue.popleft()
            run.queued -= len(g.seqs)
            for s in g.seqs:
                s.slot = heapq.heappop(run.free_slots)
            g.owner = g.seqs[0].slot
            if g.prefix:
                if not self._follow(g, run):
                    g.fed = kv.restore(g.owner, g.prefix, len(g.prefix))
                run.prefilling.append(g)
            else:
                for s in g.seqs:
                    reused = kv.restore(s.slot, s.feed, len(s.feed) - MIN_CHUNK)
                    s.pos += reused
                    s.feed = s.feed[reused:]
                    s.phase = "feed"
                    run.live.append(s)

    def _sample(self, outputs: list[Seq]) -> None:
        """Sample for the sequences that produced logits in the last decode call, in order."""
        self.sampler.sample(self.kv.logits(len(outputs)), outputs)

    def _decode_step(self, run: Schedule) -> None:
        """One decode call with the next token of every decoding sequence (slot order), then
        their next tokens sampled."""
        decoding = sorted((s for s in run.live if s.phase == "decode"), key=lambda s: s.slot)
        if not decoding:
            return
        self.kv.decode([(s.feed[0], s.pos, s.slot, True) for s in decoding])
        self.decode_pieces += 1 + sum(b.slot != a.slot + 1 for a, b in pairwise(decoding))
        self.decode_steps += 1
        self.decode_rows += len(decoding)
        longest = max(s.pos for s in decoding) + 1
        self.decode_spans[len(decoding), -(-longest // CELL_PAD) * CELL_PAD] += 1
        for s in decoding:
            s.feed = []
            s.pos += 1
        self._sample(decoding)

    def _pack(self, run: Schedule) -> None:
        """Move decoding sequences into free slots so that the decode call's slots are
        consecutive. With a KV stream per slot, llama.cpp cuts a decode call wherever the slot
        ids skip one (its `split_equal`), and each piece reads all the weights again: at the
        1.7B shape 8 sequences in slots 0-3 and 8-11 decoded 14-20% slower than in 0-7, and
        every other slot 42-49% slower (docs/speed.md). Gaps open when sequences end or wait
        for their forced verdict while others decode, and when groups of different widths
        come and go.

        The target is the run of consecutive slots, each free or decoding, that already holds
        the most decoding sequences (the lowest such run on a tie); each sequence outside it
        moves into one of its free slots (`llama_memory_seq_cp` of the whole stream, applied by
        the next decode call, then the old slot is emptied). A stream holds its cells at the
        same places in any slot, so no number changes. Nothing moves while a stream copy is
        pending, nor when a sequence to move has fewer than `PACK_LEFT` tokens left to decode
        (it would soon leave its gap anyway)."""
        kv = self.kv
        decoding = [s for s in run.live if s.phase == "decode"]
        n = len(decoding)
        if not self.pack or n < 2 or kv.copy_pending:
            return
        at = {s.slot for s in decoding}
        if max(at) - min(at) + 1 == n:
            return  # consecutive already
        free = set(run.free_slots)
        best, best_in = -1, -1
        for a in range(kv.streams - n + 1):
            window = range(a, a + n)
            if all(x in at or x in free for x in window):
                inside = sum(x in at for x in window)
                if inside > best_in:
                    best, best_in = a, inside
        if best < 0:
            return  # slots evaluating prompts split every run: nothing to gain
        window = range(best, best + n)
        moving = [s for s in decoding if s.slot not in window]
        if any(s.req.max_tokens - len(s.tokens) < PACK_LEFT for s in moving):
            return
        for s, dst in zip(sorted(moving, key=lambda s: s.slot),
                          [x for x in window if x not in at]):
            kv.copy_stream(s.slot, dst)
            kv.clear(s.slot)
            run.free_slots.remove(dst)
            run.free_slots.append(s.slot)
            s.slot = dst
        heapq.heapify(run.free_slots)
        self.sequences_packed += len(moving)

    def _prefill(self, run: Schedule) -> None:
        """Prompt chunks within `--batch-size` tokens: group prefixes first, then the sequences'
        own prompts and forced-verdict continuations. Chunks of equal length share a call (slot
        order), which llama.cpp evaluates as one ubatch without re-cutting them. A group whose
        prefix is complete is saved in the prefix cache and copied to its sequences' streams."""
        budget = self.batch_size
        work: list[tuple[int, int, int, Group | None, Seq | None]] = []
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
            self.kv.decode(items)
            self.prompt_tokens_evaluated += len(items)
            if sampled:
                self._sample(sampled)
        ready = [g for g in run.prefilling if g.source is not None and self._can_copy(g)]
        for g in ready:  # before any finished source leaves `prefilling`
            self._copy_opening(g)
        still = []
        for g in run.prefilling:
            if g.fed == len(g.prefix):
                self.kv.save(g.owner, g.prefix)
                for s in g.seqs:  # copied before the next decode call evaluates anything
                    if s.slot != g.owner:
                        self.kv.copy_stream(g.owner, s.slot)
                    s.phase = "feed"
                    run.live.append(s)
            else:
                still.append(g)
        run.prefilling = still

    def _retire(self, source: RequestSource, run: Schedule) -> None:
        """Free the slots of finished sequences; a request whose last sequence finished is
        reported to the source."""
        keep = []
        for s in run.live:
            if s.phase == "done":
                self.kv.clear(s.slot)
                heapq.heappush(run.free_slots, s.slot)
                s.job.left -= 1
                if s.job.left == 0:
                    source.done(s.job.req, self.sampler.generations(s.job.seqs))
            else:
                keep.append(s)
        run.live = keep

    def _release(self, run: Schedule) -> None:
        """A consumer that stops early (an error, Ctrl-C, a closed generator) leaves no
        sequence's cells behind for the next call."""
        for s in run.live:
            self.kv.clear(s.slot)
        for g in run.prefilling:
            for s in g.seqs:
                self.kv.clear(s.slot)

    # -- prefixes shared in flight ------------------------------------------------------
    def _follow(self, g: Group, run: Schedule) -> bool:
        """Whether `g` waits for a group that is evaluating the same opening right now (the
        comparisons of one prompt admitted together: the prompt, and often their first
        response). It then copies that group's cells (`_copy_opening`) instead of evaluating
        them a second time beside it. Only worth it when the copy covers at least `MIN_REUSE`
        tokens more than the prefix cache holds; the copy always leaves `g` at least one chunk
        of its own to evaluate, so its sequences are copied from cells it completed itself."""
        if not self.share_prefill or not run.prefilling:
            return False
        limit = len(g.prefix) - MIN_CHUNK
        cached = self.kv.cached(g.prefix, limit)
        best, best_m = None, 0
        for h in run.prefilling:
            m = min(common_prefix([g.prefix, h.prefix]), limit)
            if m > best_m:
                best, best_m = h, m
        if best is None or best_m < max(MIN_REUSE, cached + MIN_REUSE):
            return False
        g.source, g.share = best, best_m
        return True

    def _can_copy(self, g: Group) -> bool:
        """`g.source` has evaluated `g.share` tokens, and no copy into its own stream is still
        pending (llama.cpp applies stream copies at the next decode call)."""
        src = g.source
        return (src is not None and src.source is None and src.fed >= g.share
                and src.copied_at < self.kv.decode_calls)

    def _copy_opening(self, g: Group) -> None:
        """`g` takes the first `g.share` cells of `g.source`'s stream (a whole-stream copy, the
        rest then dropped): they hold the numbers evaluating those tokens at those positions
        gives, whichever chunks did it (docs/engine.md), so `g`'s samples are unchanged."""
        kv = self.kv
        kv.clear(g.owner)
        kv.copy_stream(g.source.owner, g.owner)
        kv.clear(g.owner, g.share)
        g.fed = g.share
        g.copied_at = kv.decode_calls
        self.prompt_tokens_copied += g.share
        g.source = None
