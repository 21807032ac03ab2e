"""`score --dry-run`: validate the input and estimate the work, loading only the tokenizer.

Streams the input through the same reader and mapper as a real run (so the same rows would
land in `errors`), counts the prompt tokens of every pair, and estimates generations and time.
The time estimate uses the throughput measured by earlier real runs of the same model on this
machine (kept in ~/.cache/rmjudge/throughput.json); without one it says so. Memory stays flat
in the input size: nothing per pair is kept but its id (for duplicate detection).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmjudge import cache
from rmjudge.io.intake import Intake, RowFailure
from rmjudge.io.mapping import Mapper, check_labels
from rmjudge.io.readers import read_rows
from rmjudge.runspec import resolve
from rmjudge.settings import EngineSettings, JudgeSettings


THROUGHPUT_CACHE = "throughput.json"


def throughput_key(sha256: str, device: str) -> str:
    return f"{sha256}:{device}"


def record_throughput(key: str, generated_tokens: int, generations: int, seconds: float) -> None:
    """Remember seconds per generated token and tokens per generation of a finished run."""
    if generated_tokens < 100 or seconds <= 0:
        return
    cache.update(THROUGHPUT_CACHE, key, {
        "seconds_per_token": seconds / generated_tokens,
        "tokens_per_generation": generated_tokens / max(1, generations)})


def measured_throughput(key: str) -> dict | None:
    return cache.load(THROUGHPUT_CACHE).get(key)


@dataclass
class DryRunReport:
    rows: int = 0
    pairs: int = 0
    errors: int = 0
    too_long: int = 0
    prompt_tokens: int = 0
    max_prompt_tokens: int = 0
    error_examples: list[str] = field(default_factory=list)
    schema: str | None = None  # Mapper.describe(): how the input is read
    generations_min: int = 0
    generations_max: int = 0
    throughput: dict | None = None
    max_tokens: int = 0
    context: int = 0
    server: str | None = None  # --server URL (public form): estimate requests and tokens too
    orders: int = 2

    def render(self) -> str:
        lines = [f"input read as {self.schema}"] if self.schema else []
        lines += [
            f"dry run: {self.rows} rows -> {self.pairs} pairs to judge, {self.errors} error rows"
            + (f" ({self.too_long} too long for the context of {self.context})" if self.too_long else ""),
        ]
        for e in self.error_examples:
            lines.append(f"  {e}")
        if self.pairs:
            lines.append(f"prompt tokens per pair and order: mean {self.prompt_tokens / self.pairs:.0f}, "
                         f"max {self.max_prompt_tokens}")
            lines.append(f"generations: {self.generations_min} (every pair unanimous) to "
                         f"{self.generations_max} (full self-reflection)")
        if self.server and self.pairs:
            lines += self._server_lines()
        elif self.throughput and self.pairs:
            spt = self.throughput["seconds_per_token"]
            tpg = self.throughput["tokens_per_generation"]
            lo = self.generations_min * tpg * spt
            hi = self.generations_max * tpg * spt
            lines.append(f"estimated time: {_hms(lo)} to {_hms(hi)} at the measured "
                         f"{1 / spt:.0f} generated tok/s ({tpg:.0f} tokens per generation)")
        elif self.pairs:
            lines.append("estimated time: unknown; no measured throughput for this model here "
                         "yet (a short real run, e.g. --limit 5, measures it)")
        return "\n".join(lines)


    def _server_lines(self) -> list[str]:
        """What a --server run costs: one request per generation, one priming request per
        group of requests sharing a prompt (a pair and order's rollouts, its reflections), up
        to two forced-verdict requests per unparsed generation; tokens from the prompt counts
        (reflection prompts quote rollouts, up to --max-tokens more each) and --max-tokens."""
        mean = self.prompt_tokens / self.pairs
        lo, hi = self.generations_min, self.generations_max
        groups_lo = self.pairs * self.orders
        groups_hi = groups_lo * (2 if hi > lo else 1)
        sent_lo = round(mean * (lo + groups_lo))
        sent_hi = round((mean + self.max_tokens) * (hi + groups_hi) + mean * 2 * hi)
        return [
            (f"server requests to {self.server}: {lo + groups_lo} to {hi + groups_hi} "
             f"(one per generation, one priming request per shared prompt), plus up to {2 * hi} "
             "forced-verdict requests when generations do not parse"),
            (f"estimated prompt tokens sent: {sent_lo} to {sent_hi}; tokens received: at most "
             f"{hi * self.max_tokens + 2 * hi} ({self.max_tokens} per generation)"),
            ("estimated time: unknown for a server (it depends on the server; a short real run, "
             "e.g. --limit 5, shows its speed and cost)"),
        ]


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def dry_run(source: str, js: JudgeSettings, es: EngineSettings, mapping: dict | None = None,
            limit: int | None = None, mapper: Mapper | None = None,
            server: str | None = None) -> DryRunReport:
    """`server`: the --server URL; prompts are then counted with `es.model`, the GGUF the
    server serves, and requests and tokens sent and received are estimated."""
    from rmjudge.engine import load_engine
    from rmjudge.protocol import PairOrderJob

    engine = load_engine(es, vocab_only=True)
    spec = resolve(js, engine.info, es.n_ctx)
    suffix, context = spec.suffix, spec.context
    rep = DryRunReport(max_tokens=js.max_tokens, context=context, server=server,
                       orders=len(js.order_list))
    mapper = mapper or Mapper(mapping or {}, seed=js.seed)
    rows = check_labels(mapper, read_rows(source), source, **({"max_rows": limit} if limit else {}))
    intake = Intake(rows, mapper, limit=limit)
    orders = len(js.order_list)

    def error(msg: str) -> None:
        rep.errors += 1
        if len(rep.error_examples) < 5:
            rep.error_examples.append(msg)

    for pair in intake:
        rep.rows = intake.rows_read
        if isinstance(pair, RowFailure):
            error(pair.reason)
            continue
        # Both orders hold the same text, so one tokenization counts for both.
        req = PairOrderJob(pair, "ab", js, suffix).rollout_request(js.samples)
        n = engine.count_tokens([req])[0]
        if not spec.fits(n):
            rep.too_long += 1
            error(f"row {pair.row_number}: {n} prompt tokens + {js.max_tokens} to generate exceed "
                  f"the context of {context}")
            continue
        rep.pairs += 1
        rep.prompt_tokens += n
        rep.max_prompt_tokens = max(rep.max_prompt_tokens, n)
    rep.rows = intake.rows_read
    if mapper.schema is not None:
        rep.schema = mapper.describe()
    first = js.adaptive or js.samples
    rep.generations_min = rep.pairs * orders * first
    per_order_max = js.samples + (js.samples - 1 if js.reflect else 0)
    rep.generations_max = rep.pairs * orders * per_order_max
    from rmjudge.engine.vocab import device_name

    rep.throughput = measured_throughput(throughput_key(engine.info.sha256, device_name(engine)))
    return rep
