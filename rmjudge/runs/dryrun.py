"""`score --dry-run`: validate the input and estimate the work, loading only the tokenizer.

Streams the input through the same reader and mapper as a real run (so the same rows would
land in `errors`), counts the prompt tokens of every pair, and estimates generations and time.
The time estimate uses what earlier real runs of the same model measured on this machine (kept in
~/.cache/rmjudge/throughput.json): seconds per generation, prompt evaluation included, for each
`--max-tokens` a run used, since the budget caps every generation. Without a run at the current
`--max-tokens`, the time per generation is bounded from the runs at other budgets and the
estimate is a wider range that says so; without any, it says so. Memory stays flat in the input
size: nothing per pair is kept but its id (for duplicate detection).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rmjudge.core.words import count
from rmjudge.files import cache
from rmjudge.io.intake import Intake, RowFailure
from rmjudge.prompts import PromptStyle
from rmjudge.judging.runspec import resolve
from rmjudge.core.settings import EngineSettings, JudgeSettings


THROUGHPUT_CACHE = "throughput.json"


def throughput_key(sha256: str, device: str) -> str:
    return f"{sha256}:{device}"


def record_throughput(key: str, generated_tokens: int, generations: int, seconds: float,
                      max_tokens: int) -> None:
    """Remember what a finished run measured: seconds per generated token (the latest run's),
    and per `max_tokens` budget the seconds and tokens per generation
    (`{"budgets": {"256": {"seconds_per_generation": 2.1, "tokens_per_generation": 41.5}}}`)."""
    if generated_tokens < 100 or seconds <= 0 or generations <= 0:
        return
    budgets = {str(m): {"seconds_per_generation": s, "tokens_per_generation": t}
               for m, (s, t) in measured_budgets(measured_throughput(key)).items()}
    budgets[str(max_tokens)] = {"seconds_per_generation": seconds / generations,
                                "tokens_per_generation": generated_tokens / generations}
    cache.update(THROUGHPUT_CACHE, key, {"seconds_per_token": seconds / generated_tokens,
                                         "budgets": budgets})


def record_engine_throughput(engine, generations: int, seconds: float, max_tokens: int) -> None:
    """Record what a finished run on an in-process engine measured (`record_throughput`), under
    its model and device (`Engine.throughput_device`: `cpuN`, N threads; `cuda`). Not
    recorded: servers and scripted engines (no device), and a CPU run whose thread count
    changed while it ran (the load follower): its figure belongs to no one thread count, and
    filing it under the last one would mislead the next dry run at that count."""
    device = engine.throughput_device
    if device is None:
        return
    record_throughput(throughput_key(engine.info.sha256, device),
                      engine.generated_tokens, generations, seconds, max_tokens)


def measured_throughput(key: str) -> dict | None:
    entry = cache.load(THROUGHPUT_CACHE).get(key)
    return entry if isinstance(entry, dict) else None


def measured_budgets(entry: dict | None) -> dict[int, tuple[float, float]]:
    """{max_tokens: (seconds per generation, tokens per generation)} of a throughput record;
    empty for a record of an older version, which kept figures without their budget."""
    budgets = (entry or {}).get("budgets")
    out: dict[int, tuple[float, float]] = {}
    if not isinstance(budgets, dict):
        return out
    for m, v in budgets.items():
        try:
            m, s, t = int(m), float(v["seconds_per_generation"]), float(v["tokens_per_generation"])
        except (TypeError, ValueError, KeyError):
            continue
        if m > 0 and s > 0 and t > 0:
            out[m] = (s, t)
    return out


def seconds_per_generation(measured: dict[int, tuple[float, float]], max_tokens: int
                           ) -> tuple[float, float] | None:
    """(low, high) seconds per generation at `max_tokens`; exact (low == high) when a run used
    this budget, None when no run was measured.

    From a run at budget m, with s(m) seconds per generation (its prompt evaluation plus its
    generated tokens): a generation that took L tokens there takes min(L, M) under budget M,
    between min(1, M/m) and max(1, M/m) times min(L, m), so
    s(m) * min(1, M/m) <= s(M) <= s(m) * max(1, M/m). Every measured budget bounds it; the
    tightest bounds are kept."""
    if not measured:
        return None
    if max_tokens in measured:
        s = measured[max_tokens][0]
        return s, s
    lo = max(s * min(1.0, max_tokens / m) for m, (s, _) in measured.items())
    hi = min(s * max(1.0, max_tokens / m) for m, (s, _) in measured.items())
    return min(lo, hi), max(lo, hi)


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
            f"dry run: {count(self.rows, 'row')} -> {count(self.pairs, 'pair')} to judge, "
            f"{count(self.errors, 'error row')}"
            + (f" ({self.too_long} too long for the context of {self.context})" if self.too_long else ""),
        ]
        for e in self.error_examples:
            lines.append(f"  {e[:300]}{'...' if len(e) > 300 else ''}")
        if self.pairs:
            lines.append(f"prompt tokens per pair and order: mean {self.prompt_tokens / self.pairs:.0f}, "
                         f"max {self.max_prompt_tokens}")
            lines.append(f"generations: {self.generations_min} (every pair unanimous) to "
                         f"{self.generations_max} (full self-reflection)")
        if self.server and self.pairs:
            lines += self._server_lines()
        elif self.pairs:
            lines.append(self._estimate())
        return "\n".join(lines)

    def _estimate(self) -> str:
        """The time line: generations x seconds per generation at this --max-tokens."""
        measured = measured_budgets(self.throughput)
        span = seconds_per_generation(measured, self.max_tokens)
        if span is None:
            return ("estimated time: unknown; no measured throughput for this model here yet "
                    "(a short real run, e.g. --limit 5, measures it)")
        lo, hi = self.generations_min * span[0], self.generations_max * span[1]
        spt = (self.throughput or {}).get("seconds_per_token")
        rate = f" at the measured {1 / spt:.0f} generated tok/s" \
            if isinstance(spt, (int, float)) and spt > 0 else ""
        if self.max_tokens in measured:
            tpg = measured[self.max_tokens][1]
            return (f"estimated time: {_hms(lo)} to {_hms(hi)}{rate} ({tpg:.0f} tokens per "
                    f"generation at --max-tokens {self.max_tokens})")
        runs = ", ".join(map(str, sorted(measured)))
        return (f"estimated time: {_hms(lo)} to {_hms(hi)}{rate}; no run at --max-tokens "
                f"{self.max_tokens} measured yet, so this range is bounded from runs at "
                f"--max-tokens {runs} (a short run with this --max-tokens, e.g. --limit 5, "
                "narrows it)")


    def _server_lines(self) -> list[str]:
        """What a --server run costs: one request per generation, at most one priming request
        per group of requests sharing a prompt (a pair and order's rollouts, its reflections;
        llama-server gets none, so the low end counts none), up to two forced-verdict requests
        per unparsed generation; tokens from the prompt counts (reflection prompts quote
        rollouts, up to --max-tokens more each) and --max-tokens."""
        mean = self.prompt_tokens / self.pairs
        lo, hi = self.generations_min, self.generations_max
        groups_lo = self.pairs * self.orders
        groups_hi = groups_lo * (2 if hi > lo else 1)
        sent_lo = round(mean * lo)
        sent_hi = round((mean + self.max_tokens) * (hi + groups_hi) + mean * 2 * hi)
        return [
            (f"server requests to {self.server}: {lo} to {hi + groups_hi} (one per "
             "generation, plus one priming request per shared prompt except on llama-server), "
             f"plus up to {2 * hi} forced-verdict requests when generations do not parse"),
            (f"estimated prompt tokens sent: {sent_lo} to {sent_hi}; tokens received: at most "
             f"{hi * self.max_tokens + 2 * hi} ({self.max_tokens} per generation)"),
            ("estimated time: unknown for a server (it depends on the server; a short real run, "
             "e.g. --limit 5, shows its speed and cost)"),
        ]


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def dry_run(open_input: Callable[[], Intake], js: JudgeSettings, es: EngineSettings,
            server: str | None = None, style: PromptStyle | None = None) -> DryRunReport:
    """The estimate of judging the pairs `open_input()` opens (`rmjudge.runs.setup.open_input`, called
    once the tokenizer has loaded). `server`: the --server URL; prompts are then counted with
    `es.model`, the GGUF the server serves, and requests and tokens sent and received are
    estimated. `style`: the prompt style of `js` already read (`run.check_prompting`)."""
    from rmjudge.engine import load_engine
    from rmjudge.judging.protocol import PairOrderJob

    engine = load_engine(es, vocab_only=True)
    spec = resolve(js, engine.info, es.n_ctx, style)
    js = spec.settings  # --max-tokens and --forced as this model resolves them
    suffix, context = spec.suffix, spec.context
    rep = DryRunReport(max_tokens=js.max_tokens, context=context, server=server,
                       orders=len(js.order_list))
    intake = open_input()
    mapper = intake.mapper
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
        req = PairOrderJob(pair, "ab", js, suffix, spec.style).rollout_request(js.samples)
        n = engine.count_tokens([req])[0]
        if not spec.fits(n):
            rep.too_long += 1
            error(f"row {pair.row_number}: {spec.too_long_reason(n)}")
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
