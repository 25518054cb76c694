"""The actor's and critic's micro-batch losses: hand-worked numbers and the inline formulas, bit for bit."""

import pytest
import torch

from verlog.algos.losses import gspo_policy_loss, kl_penalty, ppo_policy_loss, value_loss
from verlog.algos.objectives import ActorLoss, CriticLoss, actor_loss, critic_loss

torch.set_num_threads(1)
F64 = torch.float64


def t64(xs):
    return torch.tensor(xs, dtype=F64)


PPO = dict(policy_loss="ppo", clip_low=0.2, clip_high=0.2, dual_clip=3.0, aggregation="token-mean")


def test_actor_ppo_by_hand():
    # ratio 1 everywhere, so the clipped surrogate is -A per token: (-2 - 1) / 2 tokens = -1.5.
    # entropy bonus: 0.1 * (0.5 + 1.5) / 2 = 0.1 -> loss -1.6 (the masked third token counts nowhere).
    logp = t64([[-1.0, -2.0, -3.0]])
    mask = torch.tensor([[True, True, False]])
    out = actor_loss(logp, t64([[0.5, 1.5, 9.0]]), logp.clone(), t64([[2.0, 1.0, 5.0]]), mask, **PPO,
                     loss_normalizer=2.0, token_count=2.0, entropy_coef=0.1)
    assert isinstance(out, ActorLoss) and out.kl_ref_sum is None
    assert out.pg_loss.item() == pytest.approx(-1.5, abs=1e-12)
    assert out.entropy_sum.item() == pytest.approx(2.0, abs=1e-12)
    assert out.loss.item() == pytest.approx(-1.6, abs=1e-12)
    assert out.stats["ratio_mean"] == pytest.approx(1.0) and out.stats["clip_fraction"] == 0.0


def test_actor_kl_loss_by_hand():
    # k1 = logp - ref = [0.5, 0] on the valid tokens: sum 0.5; 0.2 * 0.5 / 2 tokens = 0.05 added
    logp = t64([[-1.0, -2.0, -3.0]])
    mask = torch.tensor([[True, True, False]])
    args = (logp, t64([[0.5, 1.5, 9.0]]), logp.clone(), t64([[2.0, 1.0, 5.0]]), mask)
    out = actor_loss(*args, **PPO, loss_normalizer=2.0, token_count=2.0, entropy_coef=0.1,
                     ref_logprobs=t64([[-1.5, -2.0, 0.0]]), kl_coef=0.2, kl_kind="k1")
    assert out.kl_ref_sum.item() == pytest.approx(0.5, abs=1e-12)
    assert out.loss.item() == pytest.approx(-1.6 + 0.05, abs=1e-12)


def test_actor_clipping_by_hand():
    # token 0: ratio e^0.5 ~ 1.65 with A = 1 -> clipped at 1.2, loss -1.2; token 1: ratio 1, A = 0 -> 0.
    # normalised by a minibatch of 4 tokens (this micro-batch holds 2): -1.2 / 4 = -0.3
    mask = torch.tensor([[True, True]])
    out = actor_loss(t64([[-0.5, -1.0]]), t64([[0.0, 0.0]]), t64([[-1.0, -1.0]]), t64([[1.0, 0.0]]), mask, **PPO,
                     loss_normalizer=4.0, token_count=4.0, entropy_coef=0.0)
    assert out.loss.item() == pytest.approx(-0.3, abs=1e-12)
    assert out.stats["clip_fraction"] == pytest.approx(0.5)


def test_actor_gspo_by_hand():
    # ratio 1: per-token loss -A; seq-mean-token-mean over 2 sequences: ((-2 - 1) / 2 + (-3)) / 2 = -2.25
    logp = t64([[-1.0, -1.0], [-2.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    out = actor_loss(logp, torch.zeros_like(logp), logp.clone(), t64([[2.0, 1.0], [3.0, 7.0]]), mask,
                     policy_loss="gspo", clip_low=3e-4, clip_high=4e-4, dual_clip=None,
                     aggregation="seq-mean-token-mean", loss_normalizer=2.0, token_count=3.0, entropy_coef=0.5)
    assert out.pg_loss.item() == pytest.approx(-2.25, abs=1e-12)
    assert out.loss.item() == pytest.approx(-2.25, abs=1e-12)  # zero entropy
    assert out.stats["seq_ratio_mean"] == pytest.approx(1.0)


def test_actor_unknown_policy_loss():
    x = t64([[0.0]])
    with pytest.raises(ValueError, match="policy_loss must be"):
        actor_loss(x, x, x, x, torch.tensor([[True]]), policy_loss="a2c", clip_low=0.2, clip_high=0.2,
                   dual_clip=None, aggregation="token-mean", loss_normalizer=1.0, token_count=1.0, entropy_coef=0.0)


def test_critic_by_hand():
    # token 0: v = 1, R = 2: (1 - 2)^2 = 1 either way; token 1: v = 2 (unclipped error 0), clipped to
    # 1 + 0.5 = 1.5: (1.5 - 2)^2 = 0.25 is the larger. 0.5 * (1 + 0.25) / 2 tokens = 0.3125; x 0.5 coef.
    mask = torch.tensor([[True, True, False]])
    out = critic_loss(t64([[1.0, 2.0, 50.0]]), t64([[1.0, 1.0, 0.0]]), t64([[2.0, 2.0, 0.0]]), mask,
                      value_clip=0.5, value_coef=0.5, token_count=2.0)
    assert isinstance(out, CriticLoss)
    assert out.value_loss.item() == pytest.approx(0.3125, abs=1e-12)
    assert out.loss.item() == pytest.approx(0.15625, abs=1e-12)
    assert out.stats["value_clip_fraction"] == pytest.approx(0.5)
    plain = critic_loss(t64([[1.0, 2.0, 50.0]]), t64([[1.0, 1.0, 0.0]]), t64([[2.0, 2.0, 0.0]]), mask,
                        value_clip=None, value_coef=1.0, token_count=2.0)
    assert plain.loss.item() == pytest.approx(0.25, abs=1e-12)  # 0.5 * (1 + 0) / 2


def _random_micro_batch(seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (4, 6)
    lp = torch.randn(shape, generator=gen).requires_grad_(True)
    return dict(
        logp=lp, old=lp.detach() + 0.3 * torch.randn(shape, generator=gen),
        ref=lp.detach() + 0.2 * torch.randn(shape, generator=gen), adv=torch.randn(shape, generator=gen),
        ent=torch.rand(shape, generator=gen).requires_grad_(True), mask=torch.rand(shape, generator=gen) > 0.3,
        v=torch.randn(shape, generator=gen).requires_grad_(True), old_v=torch.randn(shape, generator=gen),
        ret=torch.randn(shape, generator=gen))


@pytest.mark.parametrize("policy_loss", ["ppo", "gspo"])
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("kl", [None, "k1", "k3"])
def test_actor_equals_the_inline_formula_bit_for_bit(policy_loss, aggregation, kl):
    b = _random_micro_batch(7)
    m = b["mask"]
    n_tok = max(float(m.sum()), 1.0) + 3.0  # a minibatch larger than this micro-batch
    norm = max(float(m.any(-1).sum()), 1.0) + 1.0 if aggregation != "token-mean" else n_tok
    if policy_loss == "gspo":
        pg, stats = gspo_policy_loss(b["logp"], b["old"], b["adv"], m, clip_low=0.1, clip_high=0.28,
                                     loss_normalizer=norm, aggregation=aggregation)
    else:
        pg, stats = ppo_policy_loss(b["logp"], b["old"], b["adv"], m, clip_low=0.1, clip_high=0.28, dual_clip=3.0,
                                    loss_normalizer=norm, aggregation=aggregation)
    ent_sum = (b["ent"] * m).sum()
    loss = pg - 0.01 * ent_sum / n_tok
    if kl is not None:
        kl_ref = (kl_penalty(b["logp"], b["ref"], kl) * m).sum()
        loss = loss + 0.05 * kl_ref / n_tok
    out = actor_loss(b["logp"], b["ent"], b["old"], b["adv"], m, policy_loss=policy_loss, clip_low=0.1,
                     clip_high=0.28, dual_clip=3.0, aggregation=aggregation, loss_normalizer=norm, token_count=n_tok,
                     entropy_coef=0.01, ref_logprobs=b["ref"] if kl else None, kl_coef=0.05, kl_kind=kl or "k1")
    assert torch.equal(out.loss, loss) and torch.equal(out.pg_loss, pg) and torch.equal(out.entropy_sum, ent_sum)
    assert out.stats == stats
    assert (out.kl_ref_sum is None) == (kl is None)
    if kl is not None:
        assert torch.equal(out.kl_ref_sum, kl_ref)
    grads = torch.autograd.grad(out.loss, [b["logp"], b["ent"]])
    expected = torch.autograd.grad(loss, [b["logp"], b["ent"]])
    assert all(torch.equal(g, e) for g, e in zip(grads, expected))


@pytest.mark.parametrize("clip", [0.2, None])
def test_critic_equals_the_inline_formula_bit_for_bit(clip):
    b = _random_micro_batch(8)
    n_tok = float(b["mask"].sum()) + 2.0
    vl, vstats = value_loss(b["v"], b["old_v"], b["ret"], b["mask"], clip_range=clip, loss_normalizer=n_tok)
    out = critic_loss(b["v"], b["old_v"], b["ret"], b["mask"], value_clip=clip, value_coef=0.7, token_count=n_tok)
    assert torch.equal(out.value_loss, vl) and torch.equal(out.loss, 0.7 * vl) and out.stats == vstats
