"""env.revisit_penalty_schedule: the revisit cost changes at given iterations of one run.

The cost in force at iteration i is that of the latest schedule entry at or before i
(``env.revisit_penalty`` before the first); the trainer sets it on every training env, through the
vector env and its wrappers (worker processes included), before each iteration's batch is collected.
"""

from __future__ import annotations

import pytest

from helpers import SHRUNK_TINY_RUN, train_cli
from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.vector import make_vector_env
from verlog.logging import read_metrics
from verlog.preflight import check_distance_shaping

FULL_TURN = ["turn left"] * 4  # back where it started: the 4th turn revisits


def test_the_latest_entry_at_or_before_the_iteration_is_in_force():
    env = load_recipe("tiny", ["env.revisit_penalty=0.05", "env.revisit_penalty_schedule={401: 0.25, 451: 0}"]).env
    assert [env.revisit_penalty_at(it) for it in (1, 400, 401, 450, 451, 900)] == [0.05, 0.05, 0.25, 0.25, 0.0, 0.0]
    assert load_recipe("tiny").env.revisit_penalty_schedule == {}


def test_a_schedule_needs_training_envs_with_the_cost():
    with pytest.raises(ConfigError) as err:
        check_distance_shaping(load_recipe("tiny", ["env.task=crafter/default", "env.revisit_penalty_schedule={3: 0.2}"]))
    assert str(err.value) == ("env.revisit_penalty_schedule: crafter/default has no revisit penalty schedule "
                              "(BabyAI's tasks have)")
    check_distance_shaping(load_recipe("tiny", ["env.task=babyai/balrog_mix", "env.revisit_penalty_schedule={3: 0.2}"]))


def _env(task: str, cost: float):
    """A training env of ``task`` as the run builds it (EnvConfig.env_kwargs with the learner's gamma)."""
    cfg = load_recipe("tiny", [f"env.task={task}", f"env.revisit_penalty={cost}"])
    return make_env(task, **cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step))


def _costs(env, actions):
    """The reward of each step (turns on the spot: the task pays nothing, so it is the revisit cost)."""
    return [round(env.step(a)[1], 9) for a in actions]


@pytest.mark.parametrize("built_with", [0.0, 0.05])
def test_the_env_charges_the_new_cost_after_the_call(built_with):
    env = _env("babyai/goto", built_with)
    env.reset(seed=3)
    assert _costs(env, FULL_TURN) == [0.0, 0.0, 0.0, -built_with]
    env.set_revisit_penalty(0.25)
    # built with a cost, every state of this turn was seen; switched on now, counted from here (see below)
    assert _costs(env, FULL_TURN) == ([-0.25] * 4 if built_with else [0.0, 0.0, 0.0, -0.25])
    env.set_revisit_penalty(0.0)
    assert _costs(env, FULL_TURN) == [0.0] * 4
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="revisit_penalty"):
            env.set_revisit_penalty(bad)


def test_a_cost_switched_on_mid_episode_counts_revisits_from_there():
    env = _env("babyai/goto", 0.0)
    env.reset(seed=3)
    assert _costs(env, ["turn left"]) == [0.0]
    env.set_revisit_penalty(0.25)
    # back to the start state (seen before the switch: free), then on round to the switch's state (seen: charged)
    assert _costs(env, ["turn right", "turn right", "turn right", "turn right"]) == [0.0, 0.0, 0.0, -0.25]
    env.reset(seed=4)  # the next episode keeps the cost
    assert _costs(env, FULL_TURN) == [0.0, 0.0, 0.0, -0.25]


def test_the_task_mixture_sets_every_task():
    mix = _env("babyai/balrog_mix", 0.0)
    mix.set_revisit_penalty(0.25)  # before the first reset: no task drawn yet
    seen = set()
    for seed in range(40):
        mix.reset(seed=seed)
        seen.add(mix.task)
        assert _costs(mix, FULL_TURN) == [0.0, 0.0, 0.0, -0.25], mix.task
    assert seen == set(mix.tasks)  # every task played with the cost
    with pytest.raises(ValueError, match="revisit_penalty"):
        mix.set_revisit_penalty(-1.0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_vector_call_reaches_every_env_through_its_wrappers(mode):
    cfg = load_recipe("tiny", ["env.revisit_penalty=0.05"])
    venv = make_vector_env("babyai/goto", 2, seed=3, mode=mode, env_kwargs=cfg.env.env_kwargs(shaping_gamma=0.99),
                           step_timeout_s=cfg.env.step_timeout_s)
    try:
        venv.reset()
        venv.call("set_revisit_penalty", 0.25)
        rewards = [list(venv.step([action] * 2)[1]) for action in FULL_TURN]
    finally:
        venv.close()
    assert rewards == [[0.0, 0.0]] * 3 + [[-0.25, -0.25]]


def test_a_run_follows_the_schedule(tmp_path):
    """A cost of 3 in iteration 2 only: its batch, and no other, has rewards below -2 (the task's own are in
    [-0.1, 1]; the untrained policy's no-ops and turns revisit), and metrics.jsonl logs the cost in force."""
    from verlog.batch import ScoredBatch

    train_cli("tiny", "iterations=3", "env.vector_mode=async", *SHRUNK_TINY_RUN,
              "logging.dump_batch_every=1", "env.revisit_penalty=0.001", "env.revisit_penalty_schedule={2: 3, 3: 0.001}",
              f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=revisitsched")
    run = tmp_path / "revisitsched"
    assert [row["env/revisit_penalty"] for row in read_metrics(run / "metrics.jsonl")] == [0.001, 3, 0.001]
    lowest = [float(ScoredBatch.load(run / "batches" / f"iter_{it:06d}.pt").batch.rewards.min()) for it in (1, 2, 3)]
    assert lowest[0] > -2 and lowest[1] < -2 and lowest[2] > -2, lowest
