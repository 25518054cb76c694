"""rollout.temperature and rollout.temperature_schedule: the policy trained is the one sampled.

With temperature T the engine samples from softmax(logits / T) and reports that distribution's
logprobs; scoring (old and reference logprobs) and the update take theirs at the same T, so the
PPO ratio and the KL compare tempered policies. A schedule lowers T late in a run.
"""

from __future__ import annotations

import pytest
import torch

from helpers import SHRUNK_TINY_RUN, train_cli
from verlog.checkpointing import trained_iterations
from verlog.config import ConfigError, load_recipe
from verlog.logging import read_metrics
from verlog.scoring import Rows, policy_outputs


def test_the_latest_entry_at_or_before_the_iteration_is_in_force():
    rollout = load_recipe("tiny", ["rollout.temperature=0.9", "rollout.temperature_schedule={10: 0.5, 30: 0.25}"]).rollout
    assert [rollout.temperature_at(it) for it in (1, 9, 10, 29, 30, 500)] == [0.9, 0.9, 0.5, 0.5, 0.25, 0.25]
    greedy = load_recipe("tiny", ["rollout.temperature=0"]).rollout
    assert greedy.temperature_at(1) == 0.0 and greedy.policy_temperature_at(1) == 1.0


def test_stale_token_weights_under_vllm_need_temperature_one():
    with pytest.raises(ConfigError, match=r"^rollout\.max_staleness: .*vLLM"):
        load_recipe("tiny", ["rollout.engine=vllm", "rollout.max_staleness=1", "rollout.temperature_schedule={5: 0.5}"])
    load_recipe("tiny", ["rollout.engine=hf", "rollout.max_staleness=1", "rollout.temperature_schedule={5: 0.5}"])


class _Logits(torch.nn.Module):
    """A 'model' whose logits are a fixed table indexed by the input token."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None, **_):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_policy_outputs_are_the_tempered_distribution_by_hand():
    # vocabulary of 3; the prompt token 0 gives logits [2, 0, -1]; the response is token 1 then token 2.
    table = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 3.0], [0.0, 0.0, 0.0]])
    rows = Rows(input_ids=torch.tensor([[0, 1, 2]]), attention_mask=torch.ones(1, 3, dtype=torch.long),
                prompt_lengths=torch.tensor([1]), response_ids=torch.tensor([[1, 2]]),
                response_mask=torch.ones(1, 2, dtype=torch.bool))
    for t in (1.0, 0.5):
        logp, ent = policy_outputs(_Logits(table), rows, with_entropy=True, temperature=t)
        first = torch.tensor([2.0, 0.0, -1.0]) / t
        second = torch.tensor([0.0, 1.0, 3.0]) / t
        want = torch.stack([first[1] - first.logsumexp(0), second[2] - second.logsumexp(0)])
        torch.testing.assert_close(logp[0], want)
        p = torch.softmax(first, 0)
        torch.testing.assert_close(ent[0, 0], -(p * p.log()).sum())
    # by hand at T = 0.5: logits [4, 0, -2], log p(1) = 0 - log(e^4 + 1 + e^-2)
    assert float(policy_outputs(_Logits(table), rows, temperature=0.5)[0][0, 0]) == pytest.approx(-4.0206, abs=1e-4)


def test_a_run_samples_scores_and_updates_at_the_scheduled_temperature(tmp_path):
    """Iteration 1 at 0.7, iteration 2 at 0.4. With one epoch of one minibatch the update's first
    logprobs are the scored ones exactly, so the approximate KL to the old policy is 0 only when the
    update takes them at the batch's temperature; the engine's logprobs agree with the scored ones
    only when both are tempered; and in iteration 1 the reference (the initial policy) equals the
    actor, so its KL is 0 only when it too is taken at the temperature."""
    train_cli("tiny", "iterations=2", "env.vector_mode=sync", *SHRUNK_TINY_RUN,
              "ppo.kl_coef=0.1", "rollout.temperature=0.7", "rollout.temperature_schedule={2: 0.4}",
              f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=tempered")
    run = tmp_path / "tempered"
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["rollout/temperature"] for row in rows] == [0.7, 0.4]
    for row in rows:
        assert row["rollout/behaviour_vs_old_logprob_max_abs"] < 1e-4
        assert abs(row["actor/approx_kl"]) < 1e-6 and row["actor/clip_fraction"] == 0.0
    assert abs(rows[0]["actor/kl_ref"]) < 1e-6
    assert rows[1]["actor/kl_ref"] > 1e-6  # the actor has moved: the check above can fail
    # verlog-eval samples a checkpoint at the temperature it was last trained at
    assert trained_iterations(run / "checkpoints" / "iter_000002" / "actor") == 2
    assert trained_iterations(run / "format_warmup") is None
