"""Task mixtures: the per-episode task draw, the mixture env, per-task metrics, evaluation and config."""

import functools
import json
import math

import numpy as np
import pytest

from helpers import COUNT_CORPUS, CountGame, ScriptedEngine, train_cli
from verlog.catalog import MIXTURE_TASKS
from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.mixture import _DRAW_STREAM, TaskMixture, draw_task, make_task_mixture, mixture_weights
from verlog.envs.registry import is_registered, register
from verlog.envs.replay import episode_seed
from verlog.envs.vector import make_vector_env
from verlog.evaluate import EvalResult
from verlog.logging import progress_postfix, read_metrics
from verlog.memory import WindowMemory
from verlog.metrics import SuccessWindows, task_metrics
from verlog.models import load_tokenizer
from verlog.preflight import check_buildable
from verlog.rollout.collector import FixedTurnCollector
from verlog.rollout.engine import SamplingParams
from verlog.rollout.records import EpisodeRecord
from verlog.tiny_model import build_tiny_model

SHORT, LONG, MIX = "testmix/short", "testmix/long", "testmix/mix"
for _name, _factory in ((SHORT, functools.partial(CountGame, max_steps=2)),
                        (LONG, functools.partial(CountGame, max_steps=5)),
                        (MIX, functools.partial(make_task_mixture, (SHORT, LONG)))):
    if not is_registered(_name):
        register(_name, _factory)


def _reference_draw(seed, weights):
    """numpy's own weighted choice on the same stream: the slow reference of draw_task."""
    w = np.asarray(weights, dtype=np.float64)
    return int(np.random.default_rng(np.random.SeedSequence([seed, _DRAW_STREAM])).choice(w.size, p=w / w.sum()))


# ------------------------------------------------------------------ the draw
@pytest.mark.parametrize("weights", [[1, 1], [1, 2, 1], [0.1, 0, 5, 3], [7]])
def test_draw_task_is_numpys_weighted_choice_on_the_episode_seed(weights):
    assert [draw_task(s, weights) for s in range(500)] == [_reference_draw(s, weights) for s in range(500)]


def test_draw_task_follows_the_weights_and_never_draws_a_zero_weight():
    draws = np.array([draw_task(s, [1, 0, 2, 1]) for s in range(20_000)])
    assert not np.any(draws == 1)
    freq = np.bincount(draws, minlength=4) / draws.size
    se = np.sqrt(0.25 * 0.75 / draws.size)
    assert abs(freq[0] - 0.25) < 4 * se and abs(freq[2] - 0.5) < 4 * se and abs(freq[3] - 0.25) < 4 * se
    assert [draw_task(s, [0, 0, 3]) for s in range(50)] == [2] * 50


@pytest.mark.parametrize("weights", [[], [0, 0], [1, -1], [1, math.nan], [math.inf, 1]])
def test_draw_task_refuses_bad_weights(weights):
    with pytest.raises(ValueError, match="task weights"):
        draw_task(0, weights)


def test_mixture_weights_default_to_one_and_refuse_unknown_names():
    tasks = ("a/x", "a/y", "a/z")
    assert mixture_weights(tasks, None) == [1.0, 1.0, 1.0]
    assert mixture_weights(tasks, {"a/y": 3, "a/z": 0}) == [1.0, 3.0, 0.0]
    with pytest.raises(ValueError, match=r"\['a/w'\]"):
        mixture_weights(tasks, {"a/w": 1})
    with pytest.raises(ValueError, match="not all zero"):
        mixture_weights(tasks, {"a/x": 0, "a/y": 0, "a/z": 0})


# ------------------------------------------------------------------ the env
def test_balrog_mix_plays_each_drawn_task_exactly_as_that_task_alone():
    mix = make_env("babyai/balrog_mix", format_penalty=-0.1)
    assert mix.tasks == MIXTURE_TASKS["babyai/balrog_mix"]
    alone = {task: make_env(task, format_penalty=-0.1) for task in mix.tasks}
    seen = set()
    for seed in range(12):
        obs, info = mix.reset(seed=seed)
        task = mix.tasks[draw_task(seed, [1] * 5)]
        seen.add(task)
        ref_obs, ref_info = alone[task].reset(seed=seed)
        assert info["task"] == task and obs == ref_obs and {**ref_info, "task": task} == info
        assert mix.instruction == ref_info["instruction"] and mix.valid_actions == alone[task].valid_actions
        for reply in ("ACTION: turn left", "nonsense", "ACTION: go forward"):
            got, want = mix.step(reply), alone[task].step(reply)
            assert got[:4] == want[:4] and got[4] == {**want[4], "task": task}
        assert mix.episode_step == 3 and mix.progression == alone[task].progression
    assert len(seen) >= 4


def test_each_task_keeps_its_own_step_limit_and_resets_reproduce():
    env = make_env(MIX)
    lengths = {}
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        steps = 0
        while True:
            steps += 1
            *_, terminated, truncated, info = env.step("ACTION: wait")
            if terminated or truncated:
                break
        lengths.setdefault(info["task"], set()).add(steps)
        assert truncated and info["task"] == (SHORT, LONG)[draw_task(seed, [1, 1])]
    assert lengths == {SHORT: {2}, LONG: {5}}
    env.reset()  # no seed: drawn from the mixture's own stream, still a valid episode
    assert env.task in (SHORT, LONG)


def test_a_mixture_refuses_tasks_of_several_families_and_leaves_zero_weights_unbuilt():
    with pytest.raises(ValueError, match="one family"):
        TaskMixture({"a/x": CountGame(), "b/y": CountGame()})
    env = make_env(MIX, task_weights={SHORT: 0})
    assert env.tasks == (LONG,)
    assert all(env.reset(seed=s)[1]["task"] == LONG for s in range(10))
    with pytest.raises(ValueError, match="not tasks of this mixture"):
        make_env(MIX, task_weights={"testmix/nope": 1})


# ------------------------------------------------------------------ collection and metrics
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), COUNT_CORPUS, vocab_size=300, hidden_size=64,
                            num_heads=1, intermediate_size=64)
    return load_tokenizer(path)


def test_collected_episodes_carry_the_task_their_seed_drew(tokenizer):
    num_envs, turns = 3, 12
    venv = make_vector_env(MIX, num_envs, seed=0, mode="sync", env_kwargs={})
    memories = [WindowMemory(tokenizer, history_turns=1, max_prompt_tokens=256) for _ in range(num_envs)]
    engine = ScriptedEngine(tokenizer, [["ACTION: wait"] * num_envs] * turns)
    decode = lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True)  # noqa: E731
    collector = FixedTurnCollector(venv, memories, engine, decode, SamplingParams(max_tokens=8), turns,
                                   tokenizer.pad_token_id, seed=100)
    _, stats = collector.collect()
    per_env: dict[int, list[EpisodeRecord]] = {}
    for record in stats.episodes:
        per_env.setdefault(record.env_index, []).append(record)
    for n, records in per_env.items():
        for k, record in enumerate(records):  # env n's k-th episode was reset with its k-th episode seed
            want = (SHORT, LONG)[draw_task(episode_seed(100 + n, k), [1, 1])]
            assert record.task == want and record.length == (2 if want == SHORT else 5)
    assert {r.task for r in stats.episodes} == {SHORT, LONG}
    state = collector.state_dict()
    assert state["tasks"] == [s.task for s in collector.slots] and all(state["tasks"])
    collector.close()


def _record(task, success, i=0):
    return EpisodeRecord(episode_id=i, env_index=0, episode_return=float(success), length=3, success=success,
                         progression=float(success), invalid_actions=0, truncated=False, task=task)


def test_success_windows_and_task_metrics_by_hand():
    windows = SuccessWindows(size=3)
    first = [_record("a/x", True), _record("a/y", False), _record("a/x", False)]
    windows.add(first)
    assert task_metrics(first, windows) == {
        "task/a/x/episodes": 2, "task/a/x/success": 0.5, "task/a/x/success_recent100": 0.5,
        "task/a/y/episodes": 1, "task/a/y/success": 0.0, "task/a/y/success_recent100": 0.0}
    second = [_record("a/x", True), _record("a/x", True)]
    windows.add(second)  # a/x's window (size 3) now holds False, True, True
    metrics = task_metrics(second, windows)
    assert metrics["task/a/x/success_recent100"] == pytest.approx(2 / 3)
    assert metrics["task/a/y/episodes"] == 0 and math.isnan(metrics["task/a/y/success"])
    assert list(windows.overall) == [0.0, 1.0, 1.0]
    restored = SuccessWindows(size=3)
    restored.load_state_dict(json.loads(json.dumps(windows.state_dict())))
    assert restored.state_dict() == windows.state_dict()
    restored.load_state_dict({"recent_success": [1.0]})  # a checkpoint from before task mixtures
    assert restored.by_task == {} and list(restored.overall) == [1.0]
    plain = SuccessWindows()
    plain.add([_record("", True)])  # a single-task run's records name no task
    assert plain.by_task == {} and task_metrics([], plain) == {}


def test_progress_bar_shows_each_task_by_its_last_name_part():
    row = {"episode/success_recent100": 0.5, "episode/recent_episodes": 4, "task/babyai/goto/success_recent100": 1.0,
           "task/babyai/pick_up_seq_go_to/success_recent100": 0.25, "task/babyai/open/success_recent100": None}
    assert progress_postfix(row) == {"success": "0.50 (4 eps)", "goto": "1.00", "pick_up_seq_go_to": "0.25"}


def test_eval_result_breaks_a_mixture_down_by_task():
    records = [_record("a/x", True, 0), _record("a/x", False, 1), _record("a/y", True, 2), _record("a/x", True, 3)]
    result = EvalResult.from_records("a/mix", records, greedy=True)
    assert result.success_mean == 0.75 and list(result.per_task) == ["a/x", "a/y"]
    x = result.per_task["a/x"]
    assert x["episodes"] == 3 and x["success_mean"] == pytest.approx(2 / 3)
    assert x["success_se"] == pytest.approx(math.sqrt((2 / 3) * (1 / 3) / 3))
    assert result.per_task["a/y"] == {"episodes": 1, "success_mean": 1.0, "success_se": 0.0,
                                      "progression_mean": 1.0, "progression_se": 0.0}
    assert result.summary()["per_task"] == result.per_task
    single = EvalResult.from_records("a/x", [_record("a/x", True), _record("", False)], greedy=True)
    assert single.per_task == {} and "per_task" not in single.summary()


# ------------------------------------------------------------------ config
def test_task_weights_reach_only_a_mixture_and_bad_ones_are_one_line():
    cfg = load_recipe("tiny", ["env.task=babyai/balrog_mix", "env.task_weights={babyai/open: 2}"])
    assert cfg.env.env_kwargs()["task_weights"] == {"babyai/open": 2.0}
    check_buildable(cfg)
    other = load_recipe("tiny", ["env.task=babyai/goto", "env.task_weights={babyai/open: 2}"])
    assert "task_weights" not in other.env.env_kwargs()  # e.g. verlog-eval task=babyai/goto of a mixture run
    with pytest.raises(ConfigError, match=r"^env.task_weights: babyai/goto is not a task mixture"):
        check_buildable(other)
    for bad, words in (("{babyai/opn: 1}", "not tasks of this mixture"), ("{babyai/open: -1}", "non-negative")):
        cfg = load_recipe("tiny", ["env.task=babyai/balrog_mix", f"env.task_weights={bad}"])
        with pytest.raises(ConfigError, match=f"^env.task_weights: .*{words}"):
            check_buildable(cfg)
    with pytest.raises(ConfigError, match="^env.task_weights"):
        load_recipe("tiny", ["env.task_weights={babyai/open: x}"])


# ------------------------------------------------------------------ a short run
@pytest.mark.slow
def test_two_iterations_on_balrog_mix_log_and_evaluate_per_task(tmp_path):
    args = ["iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "env.vector_mode=sync",
            "rollout.turns_per_env=8", "ppo.minibatches=2", "ppo.micro_batch_size=8", "format_warmup.steps=10",
            "format_warmup.episodes=2", "model.tiny.corpus_episodes=10", "eval.episodes=10", "eval.num_envs=5",
            "eval.baseline=false", "env.max_steps=6", "logging.progress=false", "checkpoint_every=2",
            "env.task=babyai/balrog_mix", f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=mix",
            # the balrog_babyai_cpu recipe's own settings, and a discount that changes at iteration 2
            "env.distance_shaping=0.05", "env.shaping_gamma=1.0", "env.revisit_penalty=0.05", "ppo.kl_coef=0.05",
            "model.tiny.num_heads=4", "model.tiny.num_kv_heads=4",
            'memory.reply_prefix="ACTION: "',
            "gae.gamma_step=0.95", "gae.gamma_step_schedule={2: 0.8}"]
    train_cli("tiny", *args)
    run = tmp_path / "mix"
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["gae/gamma_step"] for row in rows] == [0.95, 0.8]
    assert (run / "curves_tasks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tasks = {key.split("/", 1)[1].rsplit("/", 1)[0] for row in rows for key in row if key.startswith("task/")}
    assert tasks and tasks <= set(MIXTURE_TASKS["babyai/balrog_mix"])
    assert sum(row[f"task/{t}/episodes"] for row in rows for t in tasks if f"task/{t}/episodes" in row) \
        == sum(row["episodes"] for row in rows)
    trained = json.loads((run / "eval.json").read_text())["trained"]["greedy"]
    assert sum(t["episodes"] for t in trained["per_task"].values()) == trained["episodes"] == 10
    assert set(trained["per_task"]) <= set(MIXTURE_TASKS["babyai/balrog_mix"])
    state = json.loads((run / "checkpoints" / "iter_000002" / "state_rank0.json").read_text())
    assert set(state["recent_success_by_task"]) == tasks
