"""llama.cpp models for rmjudge's engines: model loading and metadata
(`ModelInfo`), the tokenizer (chat prompts with the data's text never parsed as control
tokens), and `ModelVocab`, a model loaded for tokenization only (what
`load_engine(..., vocab_only=True)` returns). The forced-verdict plan is in
`rmjudge.engine.forcing`, the thread default in `rmjudge.engine.cpu_load`, the llama.cpp
library's set-up in `rmjudge.models.llamacpp`."""

from __future__ import annotations

import ctypes
import functools
import os
import sys

from rmjudge.engine.base import ModelInfo
from rmjudge.engine.chat import ChatTemplate
from rmjudge.prompts.sandbox import TemplateError
from rmjudge.engine.cpu_load import default_threads
from rmjudge.core.errors import ModelError
from rmjudge.models.checks import check_gguf, file_sha256
from rmjudge.models.embedded import merged_demo_adapter
from rmjudge.models.resolve import embedded_model_files, local_model
from rmjudge.prompts import suffix_for_model
from rmjudge.engine.budget import context_limit as spec_context_limit
from rmjudge.core.settings import EngineSettings
from rmjudge.core.types import GenRequest
from rmjudge.models.llamacpp import llama_backend, plain_buffers


def _meta(llama_cpp, model, key: str) -> str | None:
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):  # long chat templates
        buf = ctypes.create_string_buffer(n + 1)
        llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace")


def load_model(path: str, vocab_only: bool, n_gpu_layers: int = 0):
    llama_cpp = llama_backend()
    params = plain_buffers(llama_cpp.llama_model_default_params())
    params.vocab_only = vocab_only
    params.n_gpu_layers = n_gpu_layers
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise ModelError(f"llama.cpp could not load {path}: the file is corrupt, truncated or "
                         f"of an unsupported architecture{_cache_file_hint(path)}")
    return model


def _cache_file_hint(path: str) -> str:
    """For a file rmjudge made in its cache (the embedded judge's), how to get a sound one."""
    made = embedded_model_files()[1:]
    if any(os.path.abspath(path) == os.path.abspath(m) for m in made):
        return "; rmjudge made it in its cache: delete it and rerun, which makes it again"
    return ""


def model_info(model, path: str, lora: str | None = None, lora_scale: float = 1.0) -> ModelInfo:
    """What the run store records about a loaded model (`llama_model *`). The demo judge file
    (an adapter merged in, rmjudge/models/embedded.py) records that adapter as its LoRA."""
    if lora is None:
        lora = merged_demo_adapter(path)
    llama_cpp = llama_backend()
    arch = _meta(llama_cpp, model, "general.architecture") or "unknown"
    name = _meta(llama_cpp, model, "general.name") or os.path.basename(path)
    return ModelInfo(
        path=os.path.abspath(path), sha256=file_sha256(path), architecture=arch, name=name,
        n_ctx_train=int(_meta(llama_cpp, model, f"{arch}.context_length") or 0)
        or int(llama_cpp.llama_model_n_ctx_train(model)),
        chat_template=_meta(llama_cpp, model, "tokenizer.chat_template"),
        prompt_suffix=suffix_for_model(arch, name),
        lora=os.path.abspath(lora) if lora else None,
        lora_sha256=file_sha256(lora) if lora else None,
        lora_scale=lora_scale if lora else None,
    )


# ggml's K-quant types: llama.cpp's CPU build multiplies them with one kernel below 8 rows and
# another from 8 rows on, which round differently (measured on Q4_K and Q6_K, docs/engine.md
# "Reproducible by construction"; Q4_0 and Q8_0 give the same numbers from 2 rows on)
K_QUANT_TYPES = {10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}


def width_dependent_types(path: str) -> tuple[str, ...]:
    """The K-quant types among a GGUF's weights (its header's tensor table): on CPU a
    sample of such a model depends on how many sequences share its decode call. None where
    the environment gives every product one kernel: `GGML_CPU_TILED_MM=0` (row by row) or
    `GGML_CPU_TILED_MM_FORCE=1` (always tiled), which llama.cpp reads once per process."""
    from rmjudge.models.gguf_header import read_gguf_header

    if (os.environ.get("GGML_CPU_TILED_MM", "").strip() == "0"
            or os.environ.get("GGML_CPU_TILED_MM_FORCE", "").strip() == "1"):
        return ()
    try:
        header = read_gguf_header(path, tensors=True)
    except (OSError, ValueError):
        return ()
    return tuple(sorted({K_QUANT_TYPES[t.ggml_type] for t in header.tensors
                         if t.ggml_type in K_QUANT_TYPES}))


def check_model_file(path: str, what: str = "model") -> str:
    """The check `score --model` makes, for any command given a GGUF model: a GGUF file
    (`check_gguf`) that llama.cpp opens (vocabulary only: a truncated or corrupt file is
    refused without reading its weights). Raises ModelError naming the file."""
    check_gguf(path, what=what)
    llama_cpp = llama_backend()
    llama_cpp.llama_model_free(load_model(path, vocab_only=True))
    return path


def read_model_info(path: str) -> ModelInfo:
    """Metadata of a GGUF file, loading only its vocabulary."""
    check_gguf(path)
    llama_cpp = llama_backend()
    model = load_model(path, vocab_only=True)
    try:
        return model_info(model, path)
    finally:
        llama_cpp.llama_model_free(model)


class Tokenizer:
    """Chat-template rendering (`ChatTemplate`, from the GGUF) and llama.cpp tokenization.

    The template's own text is tokenized with special-token parsing, the data's text without,
    so control-token strings inside prompts or responses stay text."""

    def __init__(self, llama_cpp, model, info: ModelInfo):
        self.l = llama_cpp
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.bos = self.piece(llama_cpp.llama_vocab_bos(self.vocab), special=True)
        self.eos = self.piece(llama_cpp.llama_vocab_eos(self.vocab), special=True)
        self.template = ChatTemplate(
            info.chat_template, self.bos, self.eos,
            origin=f"the chat template of {info.path} (GGUF key tokenizer.chat_template)",
            fix="rmjudge cannot build prompts with it: use another GGUF of this judge, or "
                "replace the template (gguf-new-metadata IN.gguf OUT.gguf --chat-template-file "
                "FILE.jinja)")

    def render(self, messages, assistant_prefix: str) -> str:
        try:
            return self.template.render(messages, assistant_prefix)
        except TemplateError as exc:
            raise ModelError(str(exc)) from None

    def encode_prompt(self, messages, assistant_prefix: str) -> list[int]:
        """Token ids of a chat prompt: template pieces parse special tokens, data pieces not."""
        try:
            pieces = self.template.segments(messages, assistant_prefix)
        except TemplateError as exc:
            raise ModelError(str(exc)) from None
        ids: list[int] = []
        for i, (text, is_template) in enumerate(pieces):
            ids += self.tokenize(text, add_bos=i == 0 and not (self.bos and text.startswith(self.bos)),
                                  special=is_template)
        return ids

    def encode(self, text: str, special: bool = True) -> list[int]:
        add_bos = special and not (self.bos and text.startswith(self.bos))
        return self.tokenize(text, add_bos=add_bos, special=special)

    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (self.l.llama_token * cap)()
        n = self.l.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (self.l.llama_token * cap)()
            n = self.l.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> str:
        return self.piece_bytes(token, special).decode("utf-8", errors="replace")

    def piece_bytes(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.l.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.l.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self.l.llama_vocab_is_eog(self.vocab, token))

    def prompt_tokens(self, req: GenRequest) -> list[int]:
        return self.encode_prompt(req.messages, req.assistant_prefix)

    def special_tokens(self) -> list[int]:
        """Ids of the vocabulary's control and user-defined tokens (what special-token parsing
        would make of their text)."""
        attrs = self.l.LLAMA_TOKEN_ATTR_CONTROL | self.l.LLAMA_TOKEN_ATTR_USER_DEFINED
        return [t for t in range(self.n_vocab)
                if self.l.llama_vocab_get_attr(self.vocab, t) & attrs]

    @functools.cached_property
    def max_piece_bytes(self) -> int | None:
        """UTF-8 bytes of the longest token text in the vocabulary (special tokens included),
        for byte-level BPE and SentencePiece vocabularies, whose tokens each stand for the
        bytes of their text: a text of B bytes (or B characters) is then at least
        B / max_piece_bytes tokens. None for other vocabularies (no such bound)."""
        if self.l.llama_vocab_type(self.vocab) not in (self.l.LLAMA_VOCAB_TYPE_BPE,
                                                       self.l.LLAMA_VOCAB_TYPE_SPM):
            return None
        return max(len(self.piece_bytes(t, special=True)) for t in range(self.n_vocab)) or None

    def min_prompt_tokens(self, req: GenRequest) -> int:
        """A lower bound on `len(prompt_tokens(req))` that costs no tokenization: the data's
        characters over `max_piece_bytes` (0 when the vocabulary gives no bound)."""
        longest = self.max_piece_bytes
        if not longest:
            return 0
        chars = sum(len(m["content"]) for m in req.messages) + len(req.assistant_prefix)
        return chars // longest


class ModelVocab:
    """A model loaded for tokenization only (`load_engine(..., vocab_only=True)`): prompt token
    counts and the model's metadata, no weights and no `generate`."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        path = local_model(settings)
        llama_cpp = llama_backend()
        self.model = load_model(path, vocab_only=True)
        self.info = model_info(self.model, path, settings.lora, settings.lora_scale)
        self.tok = Tokenizer(llama_cpp, self.model, self.info)
        self.n_seq_ctx = context_limit(settings, self.info)
        self.on_gpu = uses_gpu(settings)

    @functools.cached_property
    def threads(self) -> int:
        """What an engine of these settings would take; sampled (0.3 s) only when asked."""
        return self.settings.threads or default_threads()

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return count_tokens(self.tok, requests, self.n_seq_ctx)


def context_limit(settings: EngineSettings, info: ModelInfo) -> int:
    """Tokens one sequence may hold (the run spec's rule, rmjudge.engine.budget.context_limit)."""
    return spec_context_limit(settings.n_ctx, info.n_ctx_train)


def uses_gpu(settings: EngineSettings) -> bool:
    """Whether llama.cpp offloads to a GPU under these settings (`--device`)."""
    gpu = bool(llama_backend().llama_supports_gpu_offload())
    if settings.device == "cuda" and not gpu:
        raise ModelError("--device cuda: this llama-cpp-python was built without GPU support;"
                         " reinstall it with CMAKE_ARGS=-DGGML_CUDA=on")
    return gpu and settings.device != "cpu"


def count_tokens(tok: Tokenizer, requests: list[GenRequest], limit: int) -> list[int]:
    """Prompt tokens of each request; for a prompt too long for `limit` by its length alone,
    the lower bound that proves it (not tokenized)."""
    out = []
    for r in requests:
        bound = tok.min_prompt_tokens(r)
        out.append(bound if bound > limit else len(tok.prompt_tokens(r)))
    return out


def device_name(engine) -> str:
    """A label for throughput records: the backend an engine (or a `ModelVocab` for the same
    settings) decodes on."""
    return "cuda" if engine.on_gpu else f"cpu{engine.threads}"


def common_prefix(seqs: list[list[int]]) -> int:
    if not seqs:
        return 0
    first = seqs[0]
    n = min(len(x) for x in seqs)
    for i in range(n):
        t = first[i]
        if any(x[i] != t for x in seqs[1:]):
            return i
    return n
