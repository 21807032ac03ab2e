"""The llama.cpp context of the batched engine: one context, many sequences, each in its own KV
stream (`kv_unified=False`), a sequence slot each.

`KVContext` makes the context (again, larger, when a longer sequence comes, the running
sequences' cells moved into it: `regrow`), applies the LoRA adapter, runs the `llama_decode`
calls (the thread count following the load: `rmjudge.engine.cpu_load.LoadFollower`), hands
out the logits, and copies, trims and clears streams (`llama_memory_seq_cp/rm`). It also keeps
the prefix cache (`rmjudge.engine.prefix_cache`): an evaluated group prefix is saved
(`llama_state_seq_get_data`), and a group or lone sequence that starts later restores the
longest cached match of its prompt into its own stream instead of evaluating it.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from rmjudge.core.errors import ModelError
from rmjudge.core.settings import EngineSettings
from rmjudge.engine.cpu_load import LoadFollower, default_threads
from rmjudge.engine.prefix_cache import PrefixCache
from rmjudge.engine.sequences import MIN_CHUNK, MIN_REUSE

CELL_PAD = 256  # llama.cpp pads each sequence's KV stream to this many cells


class KVContext:
    """The context, its KV streams and batch, the decode call and the prefix cache."""

    def __init__(self, llama_cpp, model, settings: EngineSettings, parallel: int, on_gpu: bool,
                 n_vocab: int):
        self.l = llama_cpp
        self.model = model
        self.settings = settings
        self.parallel = parallel
        self.on_gpu = on_gpu
        self.n_vocab = n_vocab
        self.ctx = None
        self.mem = None
        self.stream_size = 0  # KV cells of each sequence's stream in the current context
        self.streams = 0  # KV streams (sequence slots) of the current context, <= parallel
        self._batch = None
        self._batch_cap = 0
        self._lora = None
        self.decode_calls = 0  # llama_decode calls; a stream copy is applied by the next one
        self._copy_call = -1  # `decode_calls` when the last stream copy was asked for
        self.contexts_made = 0  # contexts made, and sequences moved into a larger one running
        self.sequences_moved = 0
        self.prefix_cache = PrefixCache(settings.prefix_cache_mb << 20)
        self.prompt_tokens_reused = 0  # prompt tokens restored from the prefix cache
        self.threads = settings.threads or default_threads()
        self.thread_counts = {self.threads}  # every count the run decoded with (load follower)
        # without --threads, the thread count follows the load while the run goes (CPU only)
        self.load_follower = None if settings.threads or on_gpu else LoadFollower(self.threads)
        if settings.lora:
            self._lora = llama_cpp.llama_adapter_lora_init(model, settings.lora.encode())
            if not self._lora:
                raise ModelError(f"llama.cpp could not load the LoRA adapter {settings.lora} "
                                 "(corrupt, or made for another base model)")

    @property
    def copy_pending(self) -> bool:
        """A stream copy was asked for that no decode call has applied yet."""
        return self._copy_call >= self.decode_calls

    def ensure(self, need: int, streams: int) -> None:
        """One KV stream per sequence slot (`kv_unified=False`), each large enough for the
        longest sequence at hand. A sequence's cells then sit at the same places whatever else
        runs, which keeps its numbers independent of the batch. The context is recreated,
        larger, only when a longer sequence comes or more slots are needed (see
        `Scheduler.steps` and `regrow`).

        `streams` (at most `parallel`): the slots the work at hand can fill. llama.cpp
        allocates and zeroes every stream's cells when it makes the context, about 0.5 s per
        GiB (1.2 s for 16 streams of 768 cells of a 1.7B model, measured), so a run that never
        fills `parallel` slots (one pair: 8 sequences) does not pay for the ones it leaves
        empty, nor hold their memory. The stream count changes no number (each slot is a
        stream of its own), but llama.cpp restores saved cells only into a context of the
        same count: more streams are made only with no sequence running, and the prefix
        cache's entries are dropped then."""
        stream = int(math.ceil(max(need, CELL_PAD) / CELL_PAD) * CELL_PAD)
        streams = min(max(streams, self.streams, 1), self.parallel)  # never fewer than now
        if self.ctx is not None and stream <= self.stream_size and streams == self.streams:
            return
        stream = max(stream, self.stream_size)
        if self.streams and streams != self.streams:
            self.prefix_cache.clear()
        l = self.l
        if self.ctx is not None:
            l.llama_free(self.ctx)
            self.ctx = None
        cap = max(self.settings.batch_size, self.parallel)
        p = l.llama_context_default_params()
        p.n_ctx = stream * streams
        p.n_batch = cap
        p.n_ubatch = cap
        p.n_seq_max = streams
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
            raise ModelError(f"llama.cpp could not create a context of {streams} x {stream} "
                             "tokens; lower --parallel or --ctx-size")
        self.stream_size = stream
        self.streams = streams
        self.contexts_made += 1
        self.mem = l.llama_get_memory(self.ctx)
        if self._lora:
            self._apply_lora()
        if self._batch is None or self._batch_cap < cap:
            if self._batch is not None:
                l.llama_batch_free(self._batch)
            self._batch = l.llama_batch_init(cap, 0, 1)
            self._batch_cap = cap

    def _apply_lora(self) -> None:
        l = self.l
        if hasattr(l, "llama_set_adapters_lora"):
            handles = (l.llama_adapter_lora_p_ctypes * 1)(self._lora) if hasattr(
                l, "llama_adapter_lora_p_ctypes") else (ctypes.c_void_p * 1)(self._lora)
            scales = (ctypes.c_float * 1)(self.settings.lora_scale)
            rc = l.llama_set_adapters_lora(self.ctx, handles, 1, scales)
        else:
            rc = l.llama_set_adapter_lora(self.ctx, self._lora, self.settings.lora_scale)
        if rc != 0:
            raise ModelError(f"llama.cpp could not apply the LoRA adapter {self.settings.lora}")

    def regrow(self, need: int, in_use: list[int]) -> bool:
        """Make the context again with streams of `need` cells while sequences run: the cells
        of every stream of `in_use` (the busy slots) are saved (`llama_state_seq_get_data`, as
        the prefix cache saves a prefix), the context is made anew and each stream's cells are
        restored into the same slot. They are the same bytes at the same positions, so no
        sample changes (docs/engine.md, "Restored prefixes"), and the batch keeps running
        instead of draining to empty first (measured on a 360M shape, 8 pairs: about 60 decode
        steps at 6 of 16 sequences; docs/speed.md). Holds the saved cells in memory meanwhile
        (at most the old context's). False, with nothing changed, while a stream copy is
        pending (llama.cpp applies it at the next decode call)."""
        if self.copy_pending:
            return False
        l = self.l
        saved = []
        for slot in in_use:
            if l.llama_memory_seq_pos_max(self.mem, slot) < 0:
                continue  # nothing in this stream yet
            size = l.llama_state_seq_get_size(self.ctx, slot)
            buf = (ctypes.c_uint8 * size)()
            if l.llama_state_seq_get_data(self.ctx, buf, size, slot) != size:
                return False
            saved.append((slot, buf))
        self.ensure(need, self.streams)  # the same count: llama.cpp restores cells only then
        for slot, buf in saved:
            if l.llama_state_seq_set_data(self.ctx, buf, len(buf), slot) == 0:
                raise ModelError("llama.cpp could not restore a running sequence's cells into a "
                                 "larger context; lower --parallel or set --ctx-size")
        self.sequences_moved += len(saved)
        return True

    # -- decode calls ----------------------------------------------------------------------
    def decode(self, items: list[tuple[int, int, int, bool]]) -> None:
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
        self.decode_calls += 1
        rc = self.l.llama_decode(self.ctx, batch)
        if rc != 0:
            raise ModelError(f"llama_decode failed (code {rc}); lower --parallel or --batch-size")

    def logits(self, rows: int) -> np.ndarray:
        """The logits of the last decode call: one row of the vocabulary per item that wanted
        logits, in order (a view of llama.cpp's buffer, valid until the next decode call)."""
        ptr = self.l.llama_get_logits(self.ctx)
        V = self.n_vocab
        return np.ctypeslib.as_array(ptr, shape=(rows * V,)).reshape(rows, V)

    # -- streams ---------------------------------------------------------------------------
    def copy_stream(self, src: int, dst: int) -> None:
        """Slot `src`'s cells copied into slot `dst`'s stream; llama.cpp applies the copy at
        the next decode call."""
        self.l.llama_memory_seq_cp(self.mem, src, dst, -1, -1)
        self._copy_call = self.decode_calls

    def clear(self, slot: int, start: int = -1) -> None:
        """Drop `slot`'s cells from position `start` on (-1: all of them)."""
        self.l.llama_memory_seq_rm(self.mem, slot, start, -1)

    # -- prefix cache ----------------------------------------------------------------------
    def cached(self, tokens: list[int], limit: int) -> int:
        """How many of `tokens` (at most `limit`) the prefix cache holds; 0 when it is off."""
        return self.prefix_cache.lookup(tokens, limit)[1] if self.prefix_cache.budget else 0

    def restore(self, slot: int, tokens: list[int], limit: int) -> int:
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
        if self.l.llama_state_seq_set_data(self.ctx, entry.state, len(entry.state), slot) == 0:
            self.clear(slot)
            return 0
        self.clear(slot, m)
        self.prompt_tokens_reused += m
        self.prefix_cache.hits += 1
        return m

    def save(self, slot: int, tokens: list[int]) -> None:
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
