"""verifiers (0.4.0, in its own virtualenv: it pins openai<3 and its own transformers) through the
proxy: the echo taskset in ``tests/data/verifiers_echo`` is run by verifiers' own eval client, which
streams every request with an ``X-Session-ID`` on one base URL; the taskset's ``@vf.reward`` scores
each reply and the reward is posted to ``/reward``; the recorded sessions become a training batch.
Then ``verlog-train`` trains the tiny model for two iterations on the taskset: each conversation's
agent runs one task in the verifiers virtualenv against the proxy (``verlog_echo_agent.py``).

The virtualenv lives in ``.cache/verifiers-0.4.0`` (gitignored) and is built once, only when
``VERLOG_BUILD_VERIFIERS=1`` (building it took 75 minutes on the loaded 2-core machine); without
it, or with ``VERLOG_VERIFIERS_PYTHON`` naming another venv's python, the test skips with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.batch import TurnBatch
from verlog.models import load_tokenizer
from verlog.proxy import OpenAIProxy, ProxyServer, proxy_batch_inputs
from verlog.tiny_model import build_tiny_model

from helpers import small_corpus, train_cli
from verlog.logging import read_metrics

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.4.0"
VENV = ROOT / ".cache" / f"verifiers-{VERSION}"
TASKSET = ROOT / "tests" / "data" / "verifiers_echo"


def _works(python: Path) -> bool:
    """Whether ``python`` imports verifiers and the echo taskset."""
    probe = subprocess.run([str(python), "-c", "import verifiers.v1, verlog_echo"], capture_output=True,
                           timeout=600, env=dict(os.environ, PYTHONPATH=str(TASKSET)))
    return probe.returncode == 0


def _build(venv: Path) -> str | None:
    """Build the verifiers virtualenv; None when it works, else one line saying why not."""
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True,
                       timeout=900)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"verifiers=={VERSION}"], check=True,
                       capture_output=True, timeout=3600)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"building the verifiers venv failed (no network?): {tail[0][:200]}"
    except subprocess.TimeoutExpired:
        return "building the verifiers venv timed out"
    return None


@pytest.fixture(scope="module")
def verifiers_python() -> Path:
    """The python of a virtualenv with verifiers, or a one-line skip."""
    given = os.environ.get("VERLOG_VERIFIERS_PYTHON")
    if given:
        if not _works(Path(given)):
            pytest.skip(f"VERLOG_VERIFIERS_PYTHON={given} cannot import verifiers.v1")
        return Path(given)
    python = VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("VERLOG_BUILD_VERIFIERS") != "1":
            pytest.skip(f"no verifiers venv at .cache/verifiers-{VERSION}; set VERLOG_BUILD_VERIFIERS=1 to build it")
        problem = _build(VENV)
        if problem:
            pytest.skip(problem)
    if not _works(python):
        pytest.skip(f".cache/verifiers-{VERSION} cannot import verifiers.v1 (rebuild it)")
    return python


def test_verifiers_client_streams_sessions_and_rewards_through_the_proxy(verifiers_python, tmp_path):
    from verlog.rollout.hf import HFEngine

    corpus = small_corpus() + ["Repeat the word: red", "red", "blue", "green", "ball"]
    model_dir = build_tiny_model(tmp_path / "m", corpus, vocab_size=400, hidden_size=64, num_heads=1,
                                 num_kv_heads=1, intermediate_size=64, num_layers=1)
    tok = load_tokenizer(model_dir)
    proxy = OpenAIProxy(HFEngine(model_dir, tok, seed=0), tok)
    with ProxyServer(proxy) as server:
        base_url = f"http://{server.host}:{server.port}/v1"
        out = subprocess.run([str(verifiers_python), str(TASKSET / "drive_proxy.py"), base_url, "4"],
                             capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, PYTHONPATH=str(TASKSET)))
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["word"] for r in results] == ["red", "blue", "green", "ball"]
    records = {r.rollout_id: r for r in proxy.recorder.pop_all()}
    assert sorted(records) == sorted(r["session"] for r in results)
    for result in results:
        record = records[result["session"]]
        (call,) = record.calls
        assert result["done"] and record.reward == result["reward"] in (0.0, 1.0)
        assert result["usage"]["completion_tokens"] == len(call.response_ids)
        assert result["content"] == (call.reply["content"] or "")
    batch = TurnBatch.from_turns(**proxy_batch_inputs(list(records.values()), "final"), pad_id=tok.pad_token_id,
                                 max_response_tokens=16)
    assert batch.rewards.shape == (1, 4)


# the calculator proxy recipe made small, on the echo taskset's rows and agent (tests/data/verifiers_echo)
ECHO = ["agent.task=verlog_echo_agent:rows", "agent.agent=verlog_echo_agent:solve", "format_warmup.steps=0",
        "iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "model.tiny.corpus_episodes=8",
        "eval.episodes=2", "eval.baseline=false", "logging.progress=false", "model.tiny.hidden_size=64",
        "model.tiny.num_heads=1", "model.tiny.intermediate_size=64", "model.tiny.vocab_size=300",
        "rollout.max_response_tokens=8", "ppo.epochs=1", "ppo.minibatches=1"]


@pytest.mark.slow
def test_the_echo_taskset_trains_two_iterations_through_verlog_train(verifiers_python, tmp_path):
    log = tmp_path / "episodes.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TASKSET), os.environ.get("PYTHONPATH", "")]),
           "VERLOG_VERIFIERS_PYTHON": str(verifiers_python), "VERIFIERS_ECHO_LOG": str(log)}
    train_cli("calculator_proxy", *ECHO, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=r",
              env=env, timeout=1200)
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo"]
    assert all(r["episodes"] == 4 and r["rollout/turns"] == 4 and r.get("env/faults", 0) == 0 for r in rows)
    result = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert result["task"] == "agent/verlog_echo_agent:rows" and "trained" in result
    episodes = [json.loads(line) for line in log.read_text().splitlines()]
    # verifiers' client played every conversation (2 x 4 trained, 2 greedy + 2 sampled evaluated) and its
    # @vf.reward scored each
    assert len(episodes) == 12
    assert all(e["reward"] == float(e["word"] in e["content"].lower()) for e in episodes)
