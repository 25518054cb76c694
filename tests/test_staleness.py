"""The stale-token correction (decoupled PPO objective): hand-worked weights, the cap, the mask, and
the identity it rests on, checked against PPO's loss weighted token by token."""

import math

import pytest
import torch

from verlog.algos.losses import ppo_policy_loss
from verlog.algos.staleness import decoupled_advantages


def test_hand_worked_weights_and_cap():
    # pi_prox / pi_behaviour per token: 0.5/0.25 = 2, 0.2/0.4 = 0.5, 0.9/0.1 = 9 -> capped at 5, 0.3/0.3 = 1
    prox = torch.log(torch.tensor([[0.5, 0.2, 0.9, 0.3]]))
    behaviour = torch.log(torch.tensor([[0.25, 0.4, 0.1, 0.3]]))
    adv = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    out, m = decoupled_advantages(adv, prox, behaviour, mask, cap=5.0)
    assert out.tolist()[0] == pytest.approx([2.0, -1.0, 2.5, 3.0], rel=1e-6)
    assert m["stale/behaviour_weight_mean"] == pytest.approx((2 + 0.5 + 5 + 1) / 4, rel=1e-6)
    assert m["stale/behaviour_weight_max"] == pytest.approx(5.0, rel=1e-6)
    assert m["stale/capped_fraction"] == pytest.approx(0.25)


def test_same_policy_leaves_the_advantages_alone_and_the_mask_zeroes():
    logp = torch.randn(2, 3, 4).clamp(max=0)
    adv = torch.randn(2, 3, 4)
    mask = torch.rand(2, 3, 4) > 0.3
    out, m = decoupled_advantages(adv, logp, logp.clone(), mask, cap=2.0)
    assert torch.equal(out[mask], adv[mask]) and bool((out[~mask] == 0).all())
    assert m["stale/behaviour_weight_mean"] == 1.0 and m["stale/capped_fraction"] == 0.0


def test_no_overflow_and_padding_cannot_leak():
    # a huge log-ratio is capped without inf; NaN/inf in padded slots stays out of the result
    prox = torch.tensor([[0.0, float("nan"), 0.0]])
    behaviour = torch.tensor([[-1000.0, float("inf"), 0.0]])
    adv = torch.tensor([[1.0, float("nan"), 2.0]])
    mask = torch.tensor([[True, False, True]])
    out, m = decoupled_advantages(adv, prox, behaviour, mask, cap=3.0)
    assert out.tolist() == [[pytest.approx(3.0), 0.0, 2.0]] and math.isfinite(m["stale/behaviour_weight_max"])


def test_empty_mask_and_bad_input():
    z = torch.zeros(2, 2)
    _, m = decoupled_advantages(z, z, z, torch.zeros(2, 2, dtype=torch.bool), cap=2.0)
    assert math.isnan(m["stale/behaviour_weight_mean"])
    with pytest.raises(TypeError, match="bool"):
        decoupled_advantages(z, z, z, z, cap=2.0)
    with pytest.raises(ValueError, match="shapes differ"):
        decoupled_advantages(z, z, torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool), cap=2.0)
    for cap in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="cap"):
            decoupled_advantages(z, z, z, torch.ones(2, 2, dtype=torch.bool), cap=cap)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_equals_ppo_loss_weighted_token_by_token(dual_clip):
    """Slow reference: the decoupled objective written out per token, w * PPO's surrogate, against PPO's
    loss on the weighted advantages; values and gradients agree."""
    g = torch.Generator().manual_seed(0)
    B, S = 4, 6
    mask = torch.rand(B, S, generator=g) > 0.2
    behaviour = -torch.rand(B, S, generator=g) * 3
    prox = behaviour + torch.randn(B, S, generator=g) * 0.8
    adv = torch.randn(B, S, generator=g)
    theta0 = prox + torch.randn(B, S, generator=g) * 0.4
    cap, eps = 2.5, 0.2

    theta = theta0.clone().requires_grad_(True)
    weighted, _ = decoupled_advantages(adv, prox, behaviour, mask, cap=cap)
    loss, _ = ppo_policy_loss(theta, prox, weighted, mask, clip_low=eps, clip_high=eps, dual_clip=dual_clip)
    loss.backward()

    ref_theta = theta0.clone().requires_grad_(True)
    total = torch.zeros(())
    for b in range(B):
        for s in range(S):
            if not mask[b, s]:
                continue
            w = min(math.exp(float(prox[b, s] - behaviour[b, s])), cap)
            r = torch.exp(ref_theta[b, s] - prox[b, s])
            a = float(adv[b, s])
            token = torch.maximum(-a * r, -a * r.clamp(1 - eps, 1 + eps))
            if dual_clip is not None and a < 0:
                token = torch.minimum(token, torch.tensor(-dual_clip * a))
            total = total + w * token
    ref = total / int(mask.sum())
    ref.backward()
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-5, abs=1e-7)
    assert torch.allclose(theta.grad, ref_theta.grad, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- the trainer with rollout.max_staleness=1

SMALL = ["ppo.critic_warmup_iterations=1", "env.num_envs=4", "env.vector_mode=sync", "rollout.turns_per_env=4",
         "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=10", "format_warmup.episodes=2",
         "model.tiny.corpus_episodes=4", "eval.episodes=2", "eval.num_envs=2", "eval.baseline=false",
         "env.max_steps=12", "logging.progress=false", "checkpoint_every=3", "rollout.max_staleness=1"]


def _rows(path):
    from verlog.logging import read_metrics

    return [{k: v for k, v in r.items() if not k.startswith(("time/", "turns_per_second"))} for r in read_metrics(path)]


def test_stale_batches_are_corrected_and_resume_exactly(tmp_path):
    from helpers import train_cli

    common = [*SMALL, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}"]
    train_cli("tiny", *common, "name=straight", "iterations=6")
    rows = _rows(tmp_path / "straight" / "metrics.jsonl")
    # warm-up (fresh), then the batch collected during it; the batch collected during the first update is one
    # update old; nothing is collected ahead in an iteration ending with a checkpoint (3) or in the last
    assert [r["rollout/staleness"] for r in rows] == [0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    stale = [r for r in rows if r["rollout/staleness"] == 1.0]
    fresh = [r for r in rows[1:] if r["rollout/staleness"] == 0.0]
    assert all("stale/behaviour_weight_mean" in r for r in stale)
    assert not any("stale/behaviour_weight_mean" in r for r in fresh)
    # the engine sampled the stale batches with the weights of one update before the ones scoring them
    worst_fresh = max(r["rollout/behaviour_vs_old_logprob_max_abs"] for r in fresh)
    assert min(r["rollout/behaviour_vs_old_logprob_max_abs"] for r in stale) > 100 * max(worst_fresh, 1e-6)

    # stopped at the checkpoint of iteration 3 and resumed: the same iterations 4-6
    train_cli("tiny", *common, "name=resumed", "iterations=3")
    train_cli("tiny", *common, "name=resumed", "iterations=6", f"resume={tmp_path / 'resumed'}")
    resumed = _rows(tmp_path / "resumed" / "metrics.jsonl")
    assert len(resumed) == 6
    for a, b in zip(rows, resumed):
        assert a.keys() == b.keys()
        for key in a:
            same = a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9) if isinstance(a[key], float) else a[key] == b[key]
            assert same, (a["iteration"], key, a[key], b[key])


@pytest.mark.parametrize("overrides, start", [
    (["rollout.max_staleness=2"], "error: rollout.max_staleness: expected 0 (synchronous) or 1"),
    (["rollout.max_staleness=1", "rollout.engine=vllm", "rollout.vllm_sleep_between_updates=true"],
     "error: rollout.max_staleness: 1 generates during the update"),
    (["rollout.max_staleness=1", "algorithm=gspo", "algo.group_size=4"], "error: rollout.max_staleness: the stale"),
    (["ppo.behaviour_weight_cap=0"], "error: ppo.behaviour_weight_cap"),
])
def test_staleness_keys_are_checked_in_one_line(overrides, start, capsys, tmp_path):
    from helpers import cli_error_line
    from verlog.cli import train_main

    line = cli_error_line(train_main, ["tiny", f"run_root={tmp_path}", *overrides], capsys)
    assert line.startswith(start), line
