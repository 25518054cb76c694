"""reasoning_gym/<dataset>: reasoning-gym's questions as one-step and retry episodes (verlog/envs/reasoning_gym.py)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed (pip install 'verlog[reasoning-gym]')")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from verlog.catalog import ENV_TASKS  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.base import INFO_KEYS, OBS_MAX_CHARS, TEXT_CHARSET, invalid_action_notice  # noqa: E402
from verlog.envs.reasoning_gym import ReasoningGymEnv, final_answer  # noqa: E402
from verlog.evaluate import RandomPolicy  # noqa: E402
from verlog.rollout.runner import EpisodeSpec, run_episodes  # noqa: E402


@pytest.fixture(scope="module")
def arithmetic() -> ReasoningGymEnv:
    return make_env("reasoning_gym/basic_arithmetic")


@pytest.fixture(scope="module")
def counting() -> ReasoningGymEnv:
    return make_env("reasoning_gym/letter_counting", attempts=3)


def _wrong(env: ReasoningGymEnv) -> str:
    """An answer that is not the right one (nor contains it)."""
    return "x" * (len(env.right_answer) + 1)


def test_the_task_list_is_reasoning_gyms_datasets():
    from reasoning_gym.factory import DATASETS

    assert set(ENV_TASKS["reasoning_gym"]) == set(DATASETS) - {"composite"}


@pytest.mark.parametrize("attempts", [1, 3])
def test_gymnasiums_check_env_passes_with_observations_in_the_text_space(attempts):
    env = make_env("reasoning_gym/basic_arithmetic", attempts=attempts, format_penalty=-0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=".*not within the observation space")
        check_env(env, skip_render_check=True)


def test_a_seed_gives_the_same_question_whatever_ran_before(arithmetic):
    random.seed(1), np.random.seed(1)
    first, info = arithmetic.reset(seed=7)
    random.seed(2), np.random.seed(2)
    arithmetic.reset(seed=8)
    other = make_env("reasoning_gym/basic_arithmetic")
    again, info_again = other.reset(seed=7)
    assert first == again and info["question_index"] == info_again["question_index"] == 7
    assert arithmetic.reset(seed=8)[0] != first
    assert arithmetic.reset(seed=7 + arithmetic.size)[0] == first  # the index is the seed modulo size
    assert set(info) >= set(INFO_KEYS) and info["valid_actions"]


def test_a_right_answer_scores_1_and_terminates(arithmetic):
    arithmetic.reset(seed=3)
    obs, reward, terminated, truncated, info = arithmetic.step(f"Let me compute.\nACTION: {arithmetic.right_answer}")
    assert (reward, terminated, truncated, info["success"], info["progression"]) == (1.0, True, False, True, 1.0)
    arithmetic.reset(seed=3)
    assert arithmetic.step(f"answer: {arithmetic.right_answer}")[1] == 1.0


def test_a_wrong_answer_scores_0_and_ends_the_one_step_episode(arithmetic):
    arithmetic.reset(seed=3)
    obs, reward, terminated, truncated, info = arithmetic.step(f"ACTION: {_wrong(arithmetic)}")
    assert (reward, terminated, truncated, info["success"], info["action_valid"]) == (0.0, True, False, False, True)
    assert obs.startswith("Not correct") and arithmetic.right_answer not in obs


def test_a_reply_without_an_answer_is_invalid_and_penalised():
    env = make_env("reasoning_gym/basic_arithmetic", format_penalty=-0.25)
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(env.right_answer)  # no marker: no answer
    assert (reward, terminated, info["action_valid"], info["game_reward"]) == (-0.25, True, False, 0.0)
    assert obs.startswith(invalid_action_notice(env.default_action))


def test_retries_give_feedback_and_end_on_the_right_answer(counting):
    counting.reset(seed=5)
    first_key = counting.state_key
    obs, reward, terminated, truncated, info = counting.step(f"ACTION: {_wrong(counting)}")
    assert (reward, terminated, truncated, info["attempts_left"]) == (0.0, False, False, 2)
    assert "2 attempts left" in obs and counting.state_key != first_key
    obs, reward, terminated, truncated, info = counting.step(f"ACTION: {counting.right_answer}")
    assert (obs, reward, terminated, truncated, info["success"]) == ("Correct.", 1.0, True, False, True)


def test_running_out_of_attempts_terminates_and_an_outside_cut_truncates(counting):
    counting.reset(seed=5)
    ends = [counting.step(f"ACTION: {_wrong(counting)}")[2:4] for _ in range(3)]
    assert ends == [(False, False), (False, False), (True, False)]  # the stated attempts: a terminal state
    assert counting.progression == 0.0 and not counting.success
    cut = make_env("reasoning_gym/letter_counting", attempts=3, max_steps=2)
    cut.reset(seed=5)
    ends = [cut.step(f"ACTION: {_wrong(cut)}")[2:4] for _ in range(2)]
    assert ends == [(False, False), (False, True)]  # env.max_steps below the attempts: a cut, bootstrapped


def test_an_episode_returns_its_best_score(counting):
    counting.reset(seed=5)
    right = counting.right_answer
    rewards = [counting.step(f"ACTION: {a}")[1] for a in (f"{right}{right}", right)]  # partial credit, then right
    assert 0 < rewards[0] < 1 and sum(rewards) == pytest.approx(1.0)


def test_state_keys_are_the_question_and_the_attempts_used(counting):
    counting.reset(seed=5)
    key = counting.state_key
    counting.reset(seed=5)
    assert counting.state_key == key
    counting.reset(seed=6)
    assert counting.state_key != key


def test_the_global_random_states_are_left_untouched():
    random.seed(11), np.random.seed(11)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    env = make_env("reasoning_gym/pool_matrix")  # seeds numpy's global generator for each question
    obs, _ = env.reset(seed=4)
    env.step("ACTION: 0")
    assert random.getstate() == python_state
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))
    np.random.seed(99)
    assert make_env("reasoning_gym/pool_matrix").reset(seed=4)[0] == obs


def test_text_outside_the_charset_is_escaped_and_fits():
    env = make_env("reasoning_gym/circuit_logic")  # draws circuits with box-drawing characters
    obs, _ = env.reset(seed=0)
    assert set(obs) <= set(TEXT_CHARSET) and len(obs) <= OBS_MAX_CHARS and "\\u2500" in obs


@pytest.mark.parametrize("reply, answer", [
    ("2 + 2 is 4.\nACTION: 4", "4"),
    ("**Answer**: [1, 2]", "[1, 2]"),
    ("ANSWER: 3\nno, wait. Action: 5<|END|>", "5"),
    ("ACTION: 1 2\n3 4\n", "1 2\n3 4"),
    ("4", None),
    ("ACTION:   ", None),
])
def test_the_answer_is_the_text_after_the_last_marker(reply, answer):
    assert final_answer(reply) == answer


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="attempts"):
        ReasoningGymEnv("basic_arithmetic", attempts=0)
    with pytest.raises(ValueError, match="max_terms"):
        ReasoningGymEnv("basic_arithmetic", config={"max_terms": 0})
    with pytest.raises(ValueError, match="config: \\['seed'\\]"):
        ReasoningGymEnv("basic_arithmetic", config={"seed": 3})


#: The random floor over the first 100 evaluation seeds (verlog-eval random task=... episodes=100):
#: mean return and success rate, as docs/environments.md reports them.
FLOORS = {"letter_counting": (0.255, 0.22), "basic_arithmetic": (0.0, 0.0), "leg_counting": (0.01, 0.01)}


@pytest.mark.parametrize("task", sorted(FLOORS))
def test_the_random_floor_is_the_documented_one(task):
    specs = [EpisodeSpec(f"reasoning_gym/{task}", 100_000 + i, i) for i in range(100)]
    records = run_episodes(specs, RandomPolicy(100_000), num_envs=4)
    mean_return = sum(r.episode_return for r in records) / len(records)
    success = sum(r.success for r in records) / len(records)
    assert (round(mean_return, 3), round(success, 2)) == FLOORS[task]


@pytest.mark.parametrize("style", ["full", "brief"])
def test_the_run_configs_env_arguments_build_it(style):
    """verlog-train and verlog-eval pass env.* keys (the tiny recipe's brief prompt, its format penalty)."""
    from verlog.config import load_recipe

    cfg = load_recipe("tiny", ["env.task=reasoning_gym/letter_counting", f"env.instruction_style={style}"])
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    env.reset(seed=0)
    assert "ACTION: <" in env.instruction
    with pytest.raises(ValueError, match="instruction_style"):
        make_env(cfg.env.task, instruction_style="short")
