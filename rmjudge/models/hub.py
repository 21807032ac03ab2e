"""Judges from the Hugging Face Hub: `--model hf:org/repo/file.gguf` or `org/repo:Q4_K_M`.

Specs (`is_hub_spec`):

- `hf:org/repo/path/file.gguf`: that file of the repository;
- `hf:org/repo:TAG` or `org/repo:TAG`: the GGUF whose name carries the quantization TAG
  (case-insensitive, between separators: `model-Q4_K_M.gguf`, `model.q4_k_m.gguf`), the way
  llama.cpp's `-hf org/repo:TAG` chooses; `mmproj` files are never chosen, and of a split GGUF
  (`-00001-of-00003.gguf`) every part is fetched and the first returned;
- `hf:org/repo`: TAG defaults to Q4_K_M, as in llama.cpp, else the only GGUF in the repository.

Files are downloaded once with `huggingface_hub` (`pip install '.[hub]'`) into its cache
(`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`) and read from there
afterwards; with `HF_HUB_OFFLINE=1`, or when the Hub takes no connection within 3 s
(`hub_unreachable`), only the cache is used, and a file that is not in it is a `ModelError`
naming the command that fetches it. `cached_ggufs()` lists the GGUF files in the
cache (`rmjudge models`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rmjudge.core.extras import install_hint
from rmjudge.core.errors import ModelError

PREFIX = "hf:"
DEFAULT_TAG = "Q4_K_M"
_REPO = r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*"
_TAGGED = re.compile(rf"^({_REPO}):([A-Za-z0-9_.-]+)$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def _first_part(filename: str) -> bool:
    """An unsplit GGUF, or part 1 of a split one."""
    m = _SPLIT.search(filename)
    return m is None or m.group(1) == "00001"


@dataclass(frozen=True)
class HubSpec:
    repo: str
    filename: str | None  # an exact file, or None: choose by tag
    tag: str | None = None


def is_hub_spec(spec: str) -> bool:
    """`hf:...` always; `org/repo:TAG` when no such local file exists."""
    if spec.startswith(PREFIX):
        return True
    return bool(_TAGGED.match(spec)) and not os.path.exists(spec)


def parse_hub_spec(spec: str) -> HubSpec:
    body = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    m = _TAGGED.match(body)
    if m:
        return HubSpec(m.group(1), None, m.group(2))
    parts = body.split("/")
    if len(parts) == 2 and all(parts):
        return HubSpec(body, None, None)
    if len(parts) > 2 and all(parts) and parts[-1].lower().endswith(".gguf"):
        return HubSpec("/".join(parts[:2]), "/".join(parts[2:]))
    raise ModelError(f"--model {spec}: a Hub model is hf:org/repo/file.gguf, hf:org/repo:Q4_K_M "
                     "or org/repo:Q4_K_M")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


_PROBED: dict[str, str | None] = {}  # endpoint -> why it is unreachable (None: reachable)


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hub (`$HF_ENDPOINT`, else https://huggingface.co) takes no TCP connection, or None
    when it does, or when a proxy is set (the proxy decides what is reachable). Asked once per
    process and endpoint, within `timeout` seconds: huggingface_hub itself retries an unreachable
    Hub for about 20 s before it gives up, and a machine without network then waits for the
    cache's answer."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if endpoint not in _PROBED:
        try:
            url = urlsplit(endpoint)
            port = url.port or (80 if url.scheme == "http" else 443)
            socket.create_connection((url.hostname or "", port), timeout=timeout).close()
            _PROBED[endpoint] = None
        except (OSError, ValueError) as exc:
            _PROBED[endpoint] = str(exc) or type(exc).__name__
    return _PROBED[endpoint]


def cache_dir() -> str:
    """The hub cache folder, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(home, "hub")


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise ModelError(f"Hub models need huggingface_hub: {install_hint('hub')}") from None
    return huggingface_hub


def _fetch_hint(repo: str, filename: str) -> str:
    return f"huggingface-cli download {repo} {filename}"


def download(repo: str, filename: str) -> str:
    """The local path of one repository file, downloaded into the cache when not there."""
    hub = _hub()
    from huggingface_hub.utils import (EntryNotFoundError, HfHubHTTPError,
                                       LocalEntryNotFoundError, RepositoryNotFoundError)

    try:
        return hub.hf_hub_download(repo, filename, cache_dir=cache_dir(),
                                   local_files_only=offline() or hub_unreachable() is not None)
    except LocalEntryNotFoundError:
        if offline():
            raise ModelError(f"hf:{repo}/{filename} is not in the Hugging Face cache "
                             f"({cache_dir()}) and HF_HUB_OFFLINE=1: fetch it once online "
                             f"(unset HF_HUB_OFFLINE, or {_fetch_hint(repo, filename)})") from None
        raise ModelError(f"cannot download hf:{repo}/{filename}: the Hub is unreachable and the "
                         "file is not cached; connect, or set HF_HUB_OFFLINE=1 to use the cache "
                         "only") from None
    except RepositoryNotFoundError:
        raise ModelError(f"the Hub has no repository {repo} (or it is private: log in with "
                         "huggingface-cli login, or set HF_TOKEN)") from None
    except EntryNotFoundError:
        raise ModelError(f"the Hub repository {repo} has no file {filename}") from None
    except HfHubHTTPError as exc:
        raise ModelError(f"cannot download hf:{repo}/{filename}: {exc}") from None


def hub_file(repo: str, filename: str) -> str | None:
    """A small repository file (a tokenizer config), or None when it cannot be had."""
    try:
        return download(repo, filename)
    except ModelError:
        return None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The connection errors huggingface_hub lets through from its HTTP client: requests'
    are OSErrors, but httpx's (huggingface_hub 1.x) and httpx2's (2.x) are not."""
    import importlib

    errors = []
    for name in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def repo_files(repo: str) -> list[str]:
    """Files of a repository: the Hub's listing, or offline the cached snapshot's files."""
    hub = _hub()
    if not offline() and hub_unreachable() is None:
        from huggingface_hub.utils import HfHubHTTPError, RepositoryNotFoundError

        try:
            return list(hub.HfApi().list_repo_files(repo))
        except RepositoryNotFoundError:
            raise ModelError(f"the Hub has no repository {repo} (or it is private: log in with "
                             "huggingface-cli login, or set HF_TOKEN)") from None
        except (HfHubHTTPError, OSError, *_transport_errors()):
            pass  # unreachable: fall back to what the cache holds
    snap = _cached_snapshot(repo)
    if snap is None:
        raise ModelError(f"hf:{repo} is not in the Hugging Face cache ({cache_dir()}) and the "
                         "Hub cannot be reached: fetch it once online "
                         f"(huggingface-cli download {repo} --include '*.gguf')")
    return sorted(str(p.relative_to(snap)) for p in snap.rglob("*")
                  if p.is_file() or p.is_symlink())


def _cached_snapshot(repo: str) -> Path | None:
    """The cached snapshot of the repository's main branch (refs/main), else the newest."""
    folder = Path(cache_dir()) / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / "main"
    if ref.is_file():
        snap = folder / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    snaps = sorted((folder / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None


def choose_gguf(files: list[str], tag: str | None, repo: str) -> str:
    """The GGUF of a repository that carries `tag` (llama.cpp's `-hf repo:TAG` choice)."""
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
    if not ggufs:
        raise ModelError(f"hf:{repo} has no GGUF file")
    want = tag or DEFAULT_TAG
    # the tag between separators; "_" may precede it but not follow (Q4_K is not Q4_K_M)
    pat = re.compile(rf"(^|[-_.]){re.escape(want)}([-.]|$)", re.IGNORECASE)
    hits = [f for f in ggufs if pat.search(_stem(f))]
    hits = [f for f in hits if _first_part(f)]
    if hits:
        return sorted(hits, key=lambda f: (len(f), f))[0]
    if tag is None and len(ggufs) == 1:
        return ggufs[0]
    tags = sorted({t for f in ggufs for t in _quant_tags(f)})
    raise ModelError(f"hf:{repo} has no GGUF tagged {want}; it has "
                     f"{', '.join(tags) if tags else ', '.join(ggufs)}: use hf:{repo}:TAG")


_QUANT = re.compile(r"(?:^|[-_.])(I?Q\d[A-Z0-9_]*|F16|BF16|F32)(?=[-.]|$)", re.IGNORECASE)


def _stem(filename: str) -> str:
    """The file name without folders, split suffix and .gguf."""
    name = filename.rsplit("/", 1)[-1]
    return _SPLIT.sub("", name) if _SPLIT.search(name) else name[:-5]


def _quant_tags(filename: str) -> list[str]:
    return [m.upper() for m in _QUANT.findall(_stem(filename))]


def resolve_hub(spec: str) -> str:
    """The local path of a Hub judge (downloading it, and every part of a split GGUF, once)."""
    s = parse_hub_spec(spec)
    filename = s.filename or choose_gguf(repo_files(s.repo), s.tag, s.repo)
    path = download(s.repo, filename)
    m = _SPLIT.search(filename)
    if m:
        total = int(m.group(2))
        for i in range(2, total + 1):
            download(s.repo, filename[: m.start()] + f"-{i:05d}-of-{total:05d}.gguf")
    return path


@dataclass(frozen=True)
class CachedGGUF:
    spec: str  # hf:org/repo/file.gguf
    path: str
    size: int
    revision: str


def cached_ggufs() -> list[CachedGGUF]:
    """GGUF files in the Hugging Face cache, one per repository file (its main snapshot)."""
    root = Path(cache_dir())
    out: list[CachedGGUF] = []
    if not root.is_dir():
        return out
    for folder in sorted(root.glob("models--*")):
        repo = folder.name[len("models--"):].replace("--", "/", 1)
        snap = _cached_snapshot(repo)
        if snap is None:
            continue
        for p in sorted(snap.rglob("*.gguf")):
            try:
                size = p.stat().st_size
            except OSError:  # a dangling link: the blob is gone
                continue
            rel = str(p.relative_to(snap))
            out.append(CachedGGUF(f"hf:{repo}/{rel}", str(p), size, snap.name))
    return out
