"""A task whose conversations belong to the agent (``agent.task=package.module:rows`` with
``agent.loop=proxy``, :mod:`verlog.agent.rows_task`): preflight's one-line refusals, the task built
from the rows, and a short ``verlog-train`` run whose agent (defined here, outside ``verlog/``) plays
each row against the proxy and posts its own reward."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import httpx
import pytest

from helpers import cli_error_line, train_cli
from verlog.agent.tasks import make_agent_task
from verlog.config import ConfigError, load_recipe
from verlog.logging import read_metrics
from verlog.preflight import check_buildable

HERE = Path(__file__).resolve().parent
MODULE = Path(__file__).stem
ROWS = f"{MODULE}:echo_rows"
AGENT = f"{MODULE}:echo_agent"
WORDS = ("red", "blue", "green", "ball")


def echo_rows(n: int, seed: int) -> list[dict]:
    """``n`` rows drawn from ``seed``: a word to repeat."""
    rng = random.Random(seed)
    return [{"word": rng.choice(WORDS)} for _ in range(n)]


def short_rows(n: int, seed: int) -> list[dict]:
    """One row too few."""
    return echo_rows(n - 1, seed)


def echo_agent(row: dict, *, base_url: str, reward_url: str, temperature: float, max_tokens: int) -> None:
    """One chat call asking for the word; reward 1 when the reply contains it. Each reply is logged to
    the file ``ECHO_AGENT_LOG`` names, if any."""
    body = {"model": "verlog", "messages": [{"role": "user", "content": f"Repeat the word: {row['word']}"}],
            "temperature": temperature, "max_tokens": max_tokens}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120).raise_for_status().json()
    content = reply["choices"][0]["message"]["content"] or ""
    httpx.post(reward_url, json={"reward": float(row["word"] in content)}, timeout=30).raise_for_status()
    if os.environ.get("ECHO_AGENT_LOG"):
        with open(os.environ["ECHO_AGENT_LOG"], "a") as log:
            log.write(json.dumps({"word": row["word"], "tokens": reply["usage"]["completion_tokens"]}) + "\n")


PROXY = ["agent.loop=proxy", f"agent.task={ROWS}", f"agent.agent={AGENT}", "format_warmup.steps=0"]


def test_the_task_hands_out_the_rows_and_its_corpus_is_their_text():
    task = make_agent_task(ROWS)
    assert task.make_items(5, 3) == echo_rows(5, 3) and task.evaluation_items(2, 7) == echo_rows(2, 7)
    assert task.corpus(2, 3) == [json.dumps(r, sort_keys=True) for r in echo_rows(2, 3)]
    assert task.warmup_scripts({"word": "red"}) == [] and task.success_reward == 1.0
    with pytest.raises(TypeError, match="played by the agent"):
        task.start({"word": "red"})
    with pytest.raises(ValueError, match="not a class"):
        make_agent_task(ROWS, dataset=f"{MODULE}:echo_rows")


def test_preflight_accepts_rows_with_the_proxy():
    check_buildable(load_recipe("calculator_proxy", PROXY))


@pytest.mark.parametrize("overrides, message", [
    (["agent.loop=tools", f"agent.task={ROWS}", "format_warmup.steps=0"],
     f"agent.task: {ROWS} is not a class; the rows of a row function are played by an agent of agent.loop=proxy"),
    ([*PROXY, f"agent.dataset={ROWS}"], "agent.dataset: "),
    ([*PROXY, "format_warmup.steps=10"], "format_warmup.steps: the agent of the row function"),
    ([*PROXY[:1], f"agent.task={MODULE}:short_rows", *PROXY[2:]], f"agent.task: {MODULE}:short_rows(2, 0) returned 1 rows"),
    ([*PROXY[:1], f"agent.task={MODULE}:WORDS_MISSING", *PROXY[2:]], "agent.task: cannot load"),
])
def test_preflight_refuses_with_one_line_naming_the_key(overrides, message):
    cfg = load_recipe("calculator_proxy", overrides)
    with pytest.raises(ConfigError) as err:
        check_buildable(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_the_cli_says_one_line(capsys):
    from verlog.cli import train_main

    line = cli_error_line(train_main, ["calculator_proxy", *PROXY, "agent.loop=tools"], capsys)
    assert line.startswith(f"error: agent.task: {ROWS} is not a class"), line


SHORT = ["iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "model.tiny.corpus_episodes=8",
         "eval.episodes=2", "eval.baseline=false", "logging.progress=false", "model.tiny.hidden_size=64",
         "model.tiny.num_heads=1", "model.tiny.intermediate_size=64", "model.tiny.vocab_size=300",
         "rollout.max_response_tokens=8", "ppo.epochs=1", "ppo.minibatches=1"]


@pytest.mark.slow
def test_an_outside_agent_trains_on_its_rows_through_verlog_train(tmp_path):
    log = tmp_path / "replies.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "ECHO_AGENT_LOG": str(log)}
    train_cli("calculator_proxy", *PROXY, *SHORT, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}",
              "name=r", env=env)
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo"]
    assert all(r["episodes"] == 4 and r["rollout/turns"] == 4 for r in rows)  # one call per row
    result = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert result["task"] == f"agent/{ROWS}" and result["episodes"] == 2 and "trained" in result
    replies = [json.loads(line) for line in log.read_text().splitlines()]
    # the agent here played every conversation: 2 iterations of 4, and 2 greedy + 2 sampled evaluated
    assert len(replies) == 2 * 4 + 2 * 2 and {r["word"] for r in replies} <= set(WORDS)
    assert all(1 <= r["tokens"] <= 8 for r in replies)
