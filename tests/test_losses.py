"""PPO/GSPO token-level losses on hand-worked numbers and against straightforward references."""

import math

import pytest
import torch

from verlog.algos.losses import (
    AGGREGATIONS,
    aggregate_loss,
    entropy_bonus,
    gspo_policy_loss,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    value_loss,
)

torch.set_num_threads(1)
F64 = torch.float64


# --------------------------------------------------------------------------------------
# entropy bonus
# --------------------------------------------------------------------------------------
def test_entropy_bonus_is_masked_mean_of_entropy():
    logits = torch.stack([torch.zeros(4), torch.tensor([100.0, 0, 0, 0]), torch.zeros(4)]).reshape(1, 3, 4)
    mask = torch.tensor([[True, True, False]])
    # (ln 4 + 0) / 2
    assert entropy_bonus(logits, mask).item() == pytest.approx(math.log(4) / 2, abs=1e-6)


# --------------------------------------------------------------------------------------
# masked_mean
# --------------------------------------------------------------------------------------
def test_masked_mean_ignores_masked_entries_even_nan():
    x = torch.tensor([[1.0, 2.0, math.nan], [3.0, math.inf, 5.0]])
    mask = torch.tensor([[True, True, False], [True, False, True]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 2 + 3 + 5) / 4)
    torch.testing.assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.5, 4.0]))


def test_masked_mean_bad_input_raises():
    with pytest.raises(ValueError, match="no valid entry"):
        masked_mean(torch.ones(3), torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="no valid entry in some slice along dim 1"):
        masked_mean(torch.ones(2, 2), torch.tensor([[True, True], [False, False]]), dim=1)
    with pytest.raises(TypeError, match="mask must be a bool"):
        masked_mean(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="has shape"):
        masked_mean(torch.ones(3), torch.ones(4, dtype=torch.bool))


# --------------------------------------------------------------------------------------
# PPO policy loss, hand-worked
# Tokens (ratio, A):  a (1.5, +1)  clipped above: max(-1.5, -1.2)      = -1.2
#                     b (0.5, -1)  clipped below: max(0.5, 0.8)        =  0.8
#                     c (1.1, +2)  inside range:  max(-2.2, -2.2)      = -2.2
#                     d (5.0, -1)  unclipped max(5, 1.2) = 5; dual clip c=3 bounds it at -3*A = 3
#                     e (masked, garbage)
# token-mean with dual clip: (-1.2 + 0.8 - 2.2 + 3) / 4 = 0.1; without: (-1.2+0.8-2.2+5)/4 = 0.6
# --------------------------------------------------------------------------------------
RATIOS = [1.5, 0.5, 1.1, 5.0, 1e3]
ADVS = [1.0, -1.0, 2.0, -1.0, 7.0]
MASK = torch.tensor([[True, True, True, True, False]])


def _policy_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0]], dtype=F64)
    new = (old + torch.log(torch.tensor([RATIOS], dtype=F64))).requires_grad_(True)
    return new, old, torch.tensor([ADVS], dtype=F64)


def test_ppo_policy_loss_hand_worked_with_dual_clip():
    new, old, adv = _policy_inputs()
    loss, m = ppo_policy_loss(new, old, adv, MASK, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    assert loss.item() == pytest.approx(0.1)
    assert m["clip_fraction"] == pytest.approx(2 / 4)  # a and b
    assert m["dual_clip_fraction"] == pytest.approx(1 / 4)  # d
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 5.0) / 4)
    assert m["ratio_max"] == pytest.approx(5.0) and m["ratio_min"] == pytest.approx(0.5)
    k3 = [(r - 1) - math.log(r) for r in RATIOS[:4]]
    assert m["approx_kl"] == pytest.approx(sum(k3) / 4)
    # gradient d loss / d logprob = -A * ratio / 4 on the unclipped token c, zero on clipped a, b, d
    (grad,) = torch.autograd.grad(loss, new)
    expected = torch.tensor([[0.0, 0.0, -2.0 * 1.1 / 4, 0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_ppo_policy_loss_without_dual_clip_and_asymmetric_range():
    new, old, adv = _policy_inputs()
    loss, m = ppo_policy_loss(new, old, adv, MASK, dual_clip=None)
    assert loss.item() == pytest.approx(0.6)
    assert m["dual_clip_fraction"] == 0.0
    # clip_high = 0.28: token a becomes -1.28 -> (-1.28 + 0.8 - 2.2 + 3) / 4 = 0.08
    loss, _ = ppo_policy_loss(new, old, adv, MASK, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(0.08)
    # clip_low = 0.3: token b becomes 0.7 -> (-1.2 + 0.7 - 2.2 + 3) / 4 = 0.075
    loss, _ = ppo_policy_loss(new, old, adv, MASK, clip_low=0.3, clip_high=0.2)
    assert loss.item() == pytest.approx(0.075)


def test_ppo_policy_loss_on_policy_is_minus_mean_advantage():
    old = torch.randn(2, 6, dtype=F64)
    adv = torch.randn(2, 6, dtype=F64)
    mask = torch.rand(2, 6) < 0.7
    mask[0, 0] = True
    loss, m = ppo_policy_loss(old.clone(), old, adv, mask)
    assert loss.item() == pytest.approx(-adv[mask].mean().item())
    assert m["clip_fraction"] == 0.0 and m["approx_kl"] == pytest.approx(0.0, abs=1e-12)


def test_micro_batch_sums_equal_full_token_mean():
    gen = torch.Generator().manual_seed(4)
    B, S = 6, 9
    old = torch.randn(B, S, generator=gen, dtype=F64)
    new = (old + 0.3 * torch.randn(B, S, generator=gen, dtype=F64)).requires_grad_(True)
    adv = torch.randn(B, S, generator=gen, dtype=F64)
    vals = torch.randn(B, S, generator=gen, dtype=F64).requires_grad_(True)
    old_vals = vals.detach() + 0.3 * torch.randn(B, S, generator=gen, dtype=F64)
    rets = torch.randn(B, S, generator=gen, dtype=F64)
    lengths = torch.tensor([1, 9, 4, 2, 7, 3])  # very uneven micro-batches
    mask = torch.arange(S) < lengths.unsqueeze(-1)

    full_pg, _ = ppo_policy_loss(new, old, adv, mask)
    full_v, _ = value_loss(vals, old_vals, rets, mask)
    g_full = torch.autograd.grad(full_pg + full_v, (new, vals))

    n_tokens = float(mask.sum())
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4), slice(4, 6)):
        pg, _ = ppo_policy_loss(new[rows], old[rows], adv[rows], mask[rows], loss_normalizer=n_tokens)
        v, _ = value_loss(vals[rows], old_vals[rows], rets[rows], mask[rows], loss_normalizer=n_tokens)
        total = total + pg + v
    g_micro = torch.autograd.grad(total, (new, vals))
    assert total.item() == pytest.approx((full_pg + full_v).item(), abs=1e-12)
    for a, b in zip(g_micro, g_full):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    # a per-micro-batch token-mean would NOT match (uneven token counts)
    naive = sum(
        ppo_policy_loss(new[r], old[r], adv[r], mask[r])[0].item() / 3
        for r in (slice(0, 1), slice(1, 4), slice(4, 6))
    )
    assert abs(naive - full_pg.item()) > 1e-3


def test_garbage_outside_mask_never_reaches_loss_or_gradients():
    gen = torch.Generator().manual_seed(6)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    garbage = torch.where(mask, torch.zeros(2, 3, dtype=F64), torch.tensor([[0, 0, math.nan], [0, math.inf, -math.inf]], dtype=F64))
    new = (torch.randn(2, 3, generator=gen, dtype=F64) + garbage).requires_grad_(True)
    vals = (torch.randn(2, 3, generator=gen, dtype=F64) + garbage).requires_grad_(True)
    others = [torch.randn(2, 3, generator=gen, dtype=F64) + garbage for _ in range(4)]
    pg, m = ppo_policy_loss(new, others[0], others[1], mask)
    vl, _ = value_loss(vals, others[2], others[3], mask)
    g_new, g_vals = torch.autograd.grad(pg + vl, (new, vals))
    assert math.isfinite(pg.item()) and math.isfinite(vl.item()) and math.isfinite(m["approx_kl"])
    assert torch.isfinite(g_new).all() and torch.isfinite(g_vals).all()
    assert (g_new[~mask] == 0).all() and (g_vals[~mask] == 0).all()


def test_policy_loss_bad_input_raises():
    new, old, adv = _policy_inputs()
    with pytest.raises(ValueError, match="has shape"):
        ppo_policy_loss(new, old[:, :3], adv, MASK)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        ppo_policy_loss(new, old, adv, MASK, dual_clip=0.5)
    with pytest.raises(ValueError, match="clip_low must be in"):
        ppo_policy_loss(new, old, adv, MASK, clip_low=1.0)
    with pytest.raises(ValueError, match="loss_normalizer must be > 0"):
        ppo_policy_loss(new, old, adv, MASK, loss_normalizer=0.0)
    with pytest.raises(ValueError, match="no valid token"):
        ppo_policy_loss(new, old, adv, torch.zeros_like(MASK))
    with pytest.raises(TypeError, match="mask must be a bool"):
        ppo_policy_loss(new, old, adv, MASK.float())


# --------------------------------------------------------------------------------------
# Value loss, hand-worked (eps = 0.2, old values all 0.5)
#   v=1.0, R=2:  (1-2)^2 = 1;   clip(1.0 -> 0.7): (0.7-2)^2 = 1.69   -> 1.69 (clip active)
#   v=0.0, R=0:  0;             clip(0.0 -> 0.3): 0.09               -> 0.09 (clip active)
#   v=0.5, R=-1: 2.25;          clip(0.5 -> 0.5): 2.25               -> 2.25
#   loss = 0.5 * (1.69 + 0.09 + 2.25) / 3 = 0.671666..., clip fraction 2/3
#   unclipped: 0.5 * (1 + 0 + 2.25) / 3 = 0.541666...
# --------------------------------------------------------------------------------------
def test_value_loss_hand_worked():
    v = torch.tensor([[1.0, 0.0, 0.5, 9.0]], dtype=F64)
    old = torch.full((1, 4), 0.5, dtype=F64)
    ret = torch.tensor([[2.0, 0.0, -1.0, -9.0]], dtype=F64)
    mask = torch.tensor([[True, True, True, False]])
    loss, m = value_loss(v, old, ret, mask, clip_range=0.2)
    assert loss.item() == pytest.approx(0.5 * 4.03 / 3)
    assert m["value_clip_fraction"] == pytest.approx(2 / 3)
    assert m["value_error"] == pytest.approx(3.25 / 3)
    loss, m = value_loss(v, old, ret, mask, clip_range=None)
    assert loss.item() == pytest.approx(0.5 * 3.25 / 3)
    assert m["value_clip_fraction"] == 0.0


def test_value_loss_bad_clip_range_raises():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="clip_range must be >= 0"):
        value_loss(x, x, x, torch.ones(1, 2, dtype=torch.bool), clip_range=-0.1)


# --------------------------------------------------------------------------------------
# KL penalties
# logp = [-1, -2], ref = [-1.5, -1]  ->  log r = ref - logp = [-0.5, 1]
#   k1 = -log r = [0.5, -1];  k2 = 0.5 (log r)^2 = [0.125, 0.5]
#   k3 = e^{log r} - 1 - log r = [e^-0.5 - 0.5, e - 2]
# --------------------------------------------------------------------------------------
def test_kl_penalty_hand_worked():
    logp = torch.tensor([-1.0, -2.0], dtype=F64)
    ref = torch.tensor([-1.5, -1.0], dtype=F64)
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([0.5, -1.0], dtype=F64))
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), torch.tensor([0.125, 0.5], dtype=F64))
    k3 = torch.tensor([math.exp(-0.5) - 0.5, math.e - 2.0], dtype=F64)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), k3)


def test_kl_k3_is_clamped_and_finite():
    out = kl_penalty(torch.tensor([-60.0, 0.0]), torch.tensor([0.0, -60.0]), "k3")
    # log r = +60 would give e^60; clamped to 10 nats. log r = -60 gives 60 - 1 (> 10) -> 10.
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.tensor([10.0, 10.0]))


def test_kl_estimators_are_unbiased_for_kl_pi_ref():
    # Monte-Carlo over a 4-way categorical: E_pi[k1] = E_pi[k3] = KL(pi || ref).
    gen = torch.Generator().manual_seed(8)
    pi = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=F64)
    ref = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=F64)
    true_kl = float((pi * (pi / ref).log()).sum())
    samples = torch.multinomial(pi, 200_000, replacement=True, generator=gen)
    logp, logref = pi.log()[samples], ref.log()[samples]
    assert kl_penalty(logp, logref, "k1").mean().item() == pytest.approx(true_kl, abs=5e-3)
    assert kl_penalty(logp, logref, "k3").mean().item() == pytest.approx(true_kl, abs=5e-3)
    assert (kl_penalty(logp, logref, "k3") >= 0).all() and (kl_penalty(logp, logref, "k2") >= 0).all()


def test_kl_bad_kind_raises():
    with pytest.raises(ValueError, match="kind must be one of"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")


# --------------------------------------------------------------------------------------
# Loss aggregation modes
#   rows: [1, 2, 3] (3 tokens), [4, pad, pad] (1 token), [pad, pad, pad] (no sequence)
#   token-mean = 10 / 4 = 2.5;  seq-mean-token-mean = (2 + 4) / 2 = 3;
#   seq-mean-token-sum = (6 + 4) / 2 = 5
# --------------------------------------------------------------------------------------
AGG_X = torch.tensor([[1.0, 2.0, 3.0], [4.0, math.nan, 9.0], [math.inf, 7.0, 7.0]], dtype=F64)
AGG_MASK = torch.tensor([[True, True, True], [True, False, False], [False, False, False]])


def test_aggregate_loss_hand_worked():
    assert aggregate_loss(AGG_X, AGG_MASK, "token-mean").item() == pytest.approx(2.5)
    assert aggregate_loss(AGG_X, AGG_MASK, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert aggregate_loss(AGG_X, AGG_MASK, "seq-mean-token-sum").item() == pytest.approx(5.0)
    assert aggregate_loss(AGG_X, AGG_MASK, "seq-mean-token-sum", loss_normalizer=4.0).item() == pytest.approx(2.5)
    assert set(AGGREGATIONS) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}


def _ref_aggregate(x, mask, mode):
    rows = [[v for v, m in zip(xr, mr) if m] for xr, mr in zip(x.tolist(), mask.tolist())]
    rows = [r for r in rows if r]
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    per_seq = [sum(r) / len(r) if mode == "seq-mean-token-mean" else sum(r) for r in rows]
    return sum(per_seq) / len(per_seq)


def test_aggregate_loss_matches_reference_on_600_random_cases():
    gen = torch.Generator().manual_seed(21)
    for case in range(600):
        B, S = (int(v) for v in torch.randint(1, 6, (2,), generator=gen))
        x = torch.randn(B, S, generator=gen, dtype=F64)
        mask = torch.rand(B, S, generator=gen) < 0.6
        mask[int(torch.randint(0, B, (1,), generator=gen)), 0] = True
        mode = AGGREGATIONS[case % 3]
        assert aggregate_loss(x, mask, mode).item() == pytest.approx(_ref_aggregate(x, mask, mode), abs=1e-12)


def test_seq_mean_micro_batches_add_up_with_sequence_normalizer():
    gen = torch.Generator().manual_seed(22)
    old = torch.randn(6, 5, generator=gen, dtype=F64)
    new = (old + 0.3 * torch.randn(6, 5, generator=gen, dtype=F64)).requires_grad_(True)
    adv = torch.randn(6, 5, generator=gen, dtype=F64)
    mask = torch.arange(5) < torch.tensor([1, 5, 2, 4, 3, 5]).unsqueeze(-1)
    for fn in (ppo_policy_loss, gspo_policy_loss):
        full, _ = fn(new, old, adv, mask, aggregation="seq-mean-token-mean")
        parts = sum(fn(new[r], old[r], adv[r], mask[r], aggregation="seq-mean-token-mean", loss_normalizer=6.0)[0]
                    for r in (slice(0, 1), slice(1, 4), slice(4, 6)))
        assert parts.item() == pytest.approx(full.item(), abs=1e-12)


def test_ppo_policy_loss_seq_mean_on_policy_is_minus_mean_of_row_means():
    # on-policy: loss per token = -A; seq-mean-token-mean = -mean_i(mean_t A_it)
    adv = torch.tensor([[1.0, 3.0, 5.0], [-2.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    old = torch.zeros(2, 3, dtype=F64)
    loss, _ = ppo_policy_loss(old.clone(), old, adv, mask, aggregation="seq-mean-token-mean")
    assert loss.item() == pytest.approx(-(2.0 + -2.0) / 2)
    loss, _ = value_loss(old, old, adv, mask, aggregation="seq-mean-token-sum")
    assert loss.item() == pytest.approx(0.5 * ((1 + 9) + 4) / 2)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        ppo_policy_loss(old, old, adv, mask, aggregation="seq-sum")


# --------------------------------------------------------------------------------------
# GSPO, hand-worked (clip 0.1 / 0.1)
#   seq 0: log-ratios 0.1, 0.3 -> mean 0.2, s = e^0.2 = 1.2214 > 1.1, A = +1 -> clipped:
#          per-token loss max(-1.2214, -1.1) = -1.1, no gradient
#   seq 1: log-ratio -0.05 -> s = e^-0.05 = 0.9512 inside [0.9, 1.1], A = +2 -> -1.9025
#   seq-mean-token-mean: (-1.1 + -2 e^-0.05) / 2; d loss / d logprob(seq 1) = -2 e^-0.05 / 2
# --------------------------------------------------------------------------------------
def test_gspo_hand_worked():
    old = torch.tensor([[-1.0, -2.0], [-0.5, -7.0]], dtype=F64)
    new = (old + torch.tensor([[0.1, 0.3], [-0.05, 0.0]], dtype=F64)).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0], [2.0, 99.0]], dtype=F64)
    mask = torch.tensor([[True, True], [True, False]])
    loss, m = gspo_policy_loss(new, old, adv, mask, clip_low=0.1, clip_high=0.1)
    s1 = math.exp(-0.05)
    assert loss.item() == pytest.approx((-1.1 - 2 * s1) / 2)
    assert m["seq_ratio_max"] == pytest.approx(math.exp(0.2)) and m["seq_ratio_min"] == pytest.approx(s1)
    assert m["clip_fraction"] == pytest.approx(2 / 3)  # both tokens of seq 0
    (grad,) = torch.autograd.grad(loss, new)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [-s1, 0.0]], dtype=F64), atol=1e-12, rtol=0)


def _ref_gspo(new, old, adv, mask, lo, hi):
    """Sequence-level GSPO objective written per row (scalar autograd ops), A constant per row."""
    terms = []
    for i in range(new.shape[0]):
        idx = [k for k in range(new.shape[1]) if mask[i, k]]
        if not idx:
            continue
        s = torch.exp(sum(new[i, k] - old[i, k] for k in idx) / len(idx))
        a = adv[i, idx[0]]
        terms.append(torch.maximum(-a * s, -a * s.clamp(1 - lo, 1 + hi)))
    return sum(terms) / len(terms)


def test_gspo_matches_sequence_level_reference_in_value_and_gradient_on_500_cases():
    gen = torch.Generator().manual_seed(23)
    for _ in range(500):
        B, S = (int(v) for v in torch.randint(1, 5, (2,), generator=gen))
        old = torch.randn(B, S, generator=gen, dtype=F64)
        new = (old + 0.2 * torch.randn(B, S, generator=gen, dtype=F64)).requires_grad_(True)
        adv = torch.randn(B, 1, generator=gen, dtype=F64).expand(B, S)  # per-sequence advantage
        mask = torch.arange(S) < torch.randint(0, S + 1, (B, 1), generator=gen)
        mask[0, 0] = True
        lo, hi = (float(v) for v in 0.2 * torch.rand(2, generator=gen, dtype=F64))
        loss, _ = gspo_policy_loss(new, old, adv, mask, clip_low=lo, clip_high=hi)
        ref = _ref_gspo(new, old, adv, mask, lo, hi)
        (g,) = torch.autograd.grad(loss, new)
        (g_ref,) = torch.autograd.grad(ref, new)
        assert loss.item() == pytest.approx(ref.item(), abs=1e-12)
        torch.testing.assert_close(g, g_ref, atol=1e-12, rtol=0)


def test_gspo_garbage_outside_mask_and_bad_input():
    mask = torch.tensor([[True, False]])
    new = torch.tensor([[-1.0, math.nan]], dtype=F64, requires_grad=True)
    loss, _ = gspo_policy_loss(new, torch.tensor([[-1.0, math.inf]], dtype=F64),
                               torch.tensor([[1.0, math.nan]], dtype=F64), mask)
    (g,) = torch.autograd.grad(loss, new)
    assert math.isfinite(loss.item()) and torch.isfinite(g).all()
    with pytest.raises(ValueError, match="no valid token"):
        gspo_policy_loss(new, new, new, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="clip_low must be in"):
        gspo_policy_loss(new, new, new, mask, clip_low=1.0)
