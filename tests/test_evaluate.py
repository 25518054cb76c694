"""Fixed-seed evaluation: episode count, seeds, success statistics, BALROG's standard error."""

import math

import pytest

from helpers import COUNT_CORPUS, COUNT_TASK, ScriptedEngine
from verlog.evaluate import evaluate, mean_and_se
from verlog.memory import WindowMemory
from verlog.models import load_tokenizer
from verlog.rollout.engine import SamplingParams
from verlog.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), COUNT_CORPUS, vocab_size=300, hidden_size=64,
                            num_heads=1, intermediate_size=64)
    return load_tokenizer(path)


def test_mean_and_se_is_population_std_over_sqrt_n():
    m, se = mean_and_se([1.0, 0.0, 1.0, 1.0])
    assert m == 0.75
    assert se == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert all(math.isnan(x) for x in mean_and_se([]))


def test_each_episode_runs_once_to_its_end(tokenizer):
    # 2 slots, 5 episodes: every call answers "end" for slot 0 and "wait" for slot 1 (truncated at 3 steps).
    engine = ScriptedEngine(tokenizer, [["ACTION: end", "ACTION: wait"]] * 50)
    result = evaluate(engine, lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True),
                      lambda: WindowMemory(tokenizer, history_turns=0), task=COUNT_TASK, episodes=5, seed=10,
                      num_envs=2, sampling=SamplingParams(max_tokens=8, greedy=True), env_kwargs={"max_steps": 3})
    assert result.episodes == 5
    assert [r.episode_id for r in result.per_episode] == [0, 1, 2, 3, 4]
    assert [r.seed for r in result.per_episode] == [10, 11, 12, 13, 14]
    assert all(r.length in (1, 3) for r in result.per_episode)
    successes = [r.success for r in result.per_episode]
    assert result.success_mean == pytest.approx(sum(successes) / 5)
    assert 0 < result.success_mean < 1  # slot 0 succeeds in one step, slot 1 always truncates
    assert all(r.truncated != r.success for r in result.per_episode)


def test_rejects_bad_counts(tokenizer):
    with pytest.raises(ValueError, match="positive"):
        evaluate(ScriptedEngine(tokenizer, []), lambda ids: [], lambda: None, task=COUNT_TASK, episodes=0, seed=0,
                 num_envs=1, sampling=SamplingParams())


class _RecordingEngine(ScriptedEngine):
    def __init__(self, tokenizer, script):
        super().__init__(tokenizer, script)
        self.seeds = []

    def generate(self, prompts, params):
        self.seeds.append(params.seed)
        return super().generate(prompts, params)


def test_seeded_sampling_gives_each_turn_its_own_seed(tokenizer):
    engine = _RecordingEngine(tokenizer, [["ACTION: wait"]] * 10)
    evaluate(engine, lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True),
             lambda: WindowMemory(tokenizer, history_turns=0), task=COUNT_TASK, episodes=1, seed=0, num_envs=1,
             sampling=SamplingParams(max_tokens=8, seed=500), env_kwargs={"max_steps": 3})
    assert engine.seeds == [500, 501, 502]


def test_the_return_has_its_standard_error_beside_its_mean():
    """A game paid by a share (e.g. hands won) is judged on its return: its SE comes with the mean."""
    from verlog.evaluate import EvalResult
    from verlog.rollout.records import EpisodeRecord

    records = [EpisodeRecord(episode_id=i, env_index=0, episode_return=r, length=5, success=False, progression=0.0,
                             invalid_actions=0, truncated=False, task="") for i, r in enumerate([0.2, 0.4, 0.6, 0.0])]
    result = EvalResult.from_records("a/x", records, greedy=True)
    assert result.return_mean == pytest.approx(0.3)
    assert result.return_se == pytest.approx(math.sqrt(0.05 / 4))  # population variance of the four returns: 0.05
    assert result.summary()["return_se"] == result.return_se
