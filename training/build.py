"""`rmjudge-train build-data` as one call: its settings (`BuildDataSettings`, from which the
command's options are generated) and `run_build_data` (check the outputs, pick the rollout
source, sample and build the unified Pref + Refl data: `training.data.build_data`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rmjudge.io.mapping import joined_map
from rmjudge.training.data import (DataConfig, DataError, Stats, build_data, check_outputs,
                                   no_items_reason, no_labelled_item)
from rmjudge.training.sources import BACKENDS, rollout_source


@dataclass(frozen=True)
class BuildDataSettings:
    """What a build-data run does. `mapping` is `--map` (declared once for every command that
    reads pairs: rmjudge.cli.mapping_options); `--config`/`--split` are applied to `source`."""

    source: str = field(metadata={"argument": True})
    output: str = field(metadata={"help": "Training file: .jsonl or .parquet.", "short": "-o"})
    model: str | None = field(default=None, metadata={
        "help": "Base model: a GGUF (llama.cpp; default: the embedded model) or an HF directory "
                "(transformers)."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside --model."})
    backend: str = field(default="auto", metadata={
        "help": "auto: llama.cpp for a GGUF, transformers otherwise.", "choices": BACKENDS})
    samples: int = field(default=8, metadata={"help": "Rollouts per item."})
    temperature: float = 1.0
    max_tokens: int = field(default=1024, metadata={"help": "Max tokens per rollout."})
    ratio: str = field(default="4:1", metadata={"help": "Pref:Refl; 1:0 = RFT baseline."})
    seed: int = 0
    limit: int | None = field(default=None, metadata={"help": "Read at most N rows."})
    mapping: str | None = field(default=None, metadata={"parse": joined_map})  # every --map
    cache: str | None = field(default=None, metadata={
        "help": "Rollout cache (default: OUTPUT.rollouts.jsonl)."})
    chunk_items: int = field(default=16, metadata={"help": "Items per generate call."})
    parallel: int | None = field(default=None, metadata={
        "help": "llama.cpp live sequences per batch."})
    threads: int | None = field(default=None, metadata={"help": "llama.cpp CPU threads."})
    lora: str | None = field(default=None, metadata={
        "help": "A GGUF LoRA adapter applied to the GGUF --model (e.g. a warm-start adapter from "
                "`rmjudge-export lora`)."})
    criteria: str | None = field(default=None, metadata={
        "help": "Judging criteria in both prompts, as `rmjudge score --criteria`: a built-in "
                "name, @FILE or the text (train the judge for that rubric).",
        "metavar": "NAME|@FILE|TEXT"})
    overwrite: bool = field(default=False, metadata={
        "help": "Replace an existing -o (and its stats file) that build-data did not write; an "
                "input is never replaced.", "flag": "--overwrite"})



def run_build_data(s: BuildDataSettings, server=None,
                   say: Callable[[str], None] = lambda text: None) -> Stats:
    """Sample rollouts from the base (in-process, or through an OpenAI-compatible server:
    `server`, a ServerSettings) and write the unified training data and its stats file beside
    it. Everything a user can get wrong (the mapping, the ratio, --samples, the criteria, the
    outputs) is refused before a model loads."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.io.readers import detect_format
    from rmjudge.prompts.criteria import resolve_criteria

    from rmjudge.training.rollouts import SamplingSettings

    config = DataConfig(ratio=s.ratio, seed=s.seed, limit=s.limit, mapping=parse_map(s.mapping),
                        chunk_items=s.chunk_items)
    if s.samples < 2:
        raise DataError("--samples must be at least 2 (mixed outcomes need two rollouts)")
    if not 0.0 <= s.temperature <= 5.0:  # the bounds of `rmjudge score --temperature`
        raise DataError("--temperature must be between 0 and 5")
    if s.max_tokens < 8:  # an analysis and a verdict; `rmjudge score --max-tokens`'s bound
        raise DataError("--max-tokens must be at least 8")
    sampling = SamplingSettings(samples=s.samples, temperature=s.temperature,
                                max_tokens=s.max_tokens, seed=s.seed,
                                criteria=resolve_criteria(s.criteria))
    gguf = str(Path(s.model) / s.gguf_file) if s.model and s.gguf_file else None
    detect_format(s.source)  # an input that cannot be read fails before a model loads
    check_outputs(s.source, s.output, s.cache, inputs=(s.model, gguf, s.lora),
                  overwrite=s.overwrite)
    empty = no_labelled_item(s.source, config)
    if empty is not None:
        raise DataError(f"no training example can be built from {s.source}: "
                        f"{no_items_reason(empty)}; nothing was written")
    src, desc = rollout_source(s.model, s.gguf_file, s.backend, sampling, s.parallel, s.threads,
                               server, s.lora)
    say(f"rollouts: {s.samples} per item, temperature {s.temperature}, {desc}")
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        say(f"  {done[0]} items")

    return build_data(s.source, s.output, src, config, cache_path=s.cache, progress=progress,
                      overwrite=s.overwrite)
