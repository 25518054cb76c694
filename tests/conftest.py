"""Session-wide test isolation: no torch.distributed variables leak into later subprocesses.

A test that trains in the pytest process sets up a single-process torch.distributed world and
writes RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT into ``os.environ`` (so do
in-process vLLM engines). Left there, a later ``verlog-train`` subprocess inherits them and tries
to listen on the same MASTER_PORT, which the pytest process still holds (EADDRINUSE). After every
test those variables are restored. The process group itself stays (DeepSpeed keeps references to
it); :func:`verlog.distributed.init_distributed` refills the variables for the next in-process run.
"""

from __future__ import annotations

import os

import pytest

DIST_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def _restore_distributed_variables():
    before = {key: os.environ.get(key) for key in DIST_VARIABLES}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


#: The layer count of :func:`tiny3`.
TINY3_LAYERS = 3


@pytest.fixture(scope="session")
def tiny3(tmp_path_factory):
    """A 3-layer tiny model directory (hidden size 32, 2 heads), for tests that freeze some layers."""
    from helpers import small_corpus
    from verlog.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny3") / "m"
    build_tiny_model(path, small_corpus(), seed=0, vocab_size=300, hidden_size=32, num_layers=TINY3_LAYERS,
                     num_heads=2, num_kv_heads=1, intermediate_size=64)
    return path


@pytest.fixture(scope="session")
def calc_tok(tmp_path_factory):
    """The tokenizer of a one-layer tiny model built on calculator conversations (read-only), for the
    tool-loop tests whose fake engines reply through it."""
    from verlog.agent.calculator import calculator_corpus
    from verlog.models import load_tokenizer
    from verlog.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", calculator_corpus(40, 1, 20), vocab_size=400,
                            hidden_size=64, num_heads=1, num_kv_heads=1, intermediate_size=64, num_layers=1)
    return load_tokenizer(path)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny model directory built once on :func:`helpers.small_corpus` (read-only for the tests)."""
    from helpers import small_corpus
    from verlog.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", small_corpus())


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct as an ordinary model directory: the packaged model ``smollm2-135m-instruct``
    (installed by ``make install``) converted from its GGUF file once per session into a cache under
    pytest's temporary directory (read-only for the tests; the cache is the directory's parent)."""
    from pathlib import Path

    from verlog.model_sources import resolve_model

    return Path(resolve_model("smollm2-135m-instruct", tmp_path_factory.mktemp("model_cache")))


@pytest.fixture(scope="session")
def textworld_cache(tmp_path_factory):
    """A TextWorld game cache holding :data:`helpers.TEXTWORLD_PREMADE` at
    :data:`helpers.TEXTWORLD_FAST_SETTINGS`, generated once per session with HOME and TMPDIR pointed at
    empty folders (generation must write nothing there)."""
    from concurrent.futures import ThreadPoolExecutor

    from helpers import TEXTWORLD_FAST_SETTINGS, TEXTWORLD_PREMADE
    from verlog.envs.textworld_games import ensure_game, resolve_spec

    root = tmp_path_factory.mktemp("tw")
    home, tmp = root / "home", root / "tmp"
    home.mkdir()
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("TMPDIR", str(tmp))
        with ThreadPoolExecutor(2) as pool:  # two generator processes at a time
            jobs = [pool.submit(ensure_game, resolve_spec(task, TEXTWORLD_FAST_SETTINGS[task]), index, root / "cache")
                    for task, index in TEXTWORLD_PREMADE]
            for job in jobs:
                job.result()
    assert list(home.iterdir()) == [], "generation wrote into HOME"
    assert list(tmp.iterdir()) == [], "generation wrote into TMPDIR"
    return root / "cache"
