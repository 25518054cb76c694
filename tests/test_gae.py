"""Dual-discount GAE: hand-worked numbers, the slow reference, the turn-level reduction,
episode-boundary semantics and input validation."""

import inspect
import math

import pytest
import torch

from verlog.algos.gae import dual_discount_gae, padded_dual_discount_gae, reference_dual_discount_gae

torch.set_num_threads(1)
F64 = torch.float64


def _batch(rewards, values, lengths, terminated, truncated, bootstrap):
    """Build tensors from nested lists; padding slots in rewards/values may hold anything."""
    r = torch.tensor(rewards, dtype=F64)
    v = torch.tensor(values, dtype=F64)
    L = torch.tensor(lengths)
    mask = torch.arange(r.shape[-1]) < L.unsqueeze(-1)
    return (
        r, v, mask,
        torch.tensor(terminated), torch.tensor(truncated),
        torch.tensor(bootstrap, dtype=F64),
    )


def _both(batch, *gammas):
    """Run the vectorised GAE and the reference; they must agree; return the vectorised."""
    adv, ret = dual_discount_gae(*batch, *gammas)
    adv_ref, ret_ref = reference_dual_discount_gae(*batch, *gammas)
    torch.testing.assert_close(adv, adv_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(ret, ret_ref, atol=1e-12, rtol=0)
    return adv, ret


# --------------------------------------------------------------------------------------
# Hand-worked two-turn example: T=2, N=1, R=3; turn 0 has L=2, turn 1 has L=3.
#   turn 0: r = [0, 1, pad], V = [0.5, 0.4, pad]
#   turn 1: r = [0, 0, 2],   V = [0.6, 0.3, 0.2]
# No episode end; turn 1 is the last of the batch, so it bootstraps with
# bootstrap_values[0, 1] = 1.0 (bootstrap_values[0, 0] = NaN must never be read).
# gamma_step = 0.9, lam_step = 0.8.
# --------------------------------------------------------------------------------------
NAN = float("nan")
HAND = dict(
    rewards=[[[0.0, 1.0, NAN]], [[0.0, 0.0, 2.0]]],
    values=[[[0.5, 0.4, NAN]], [[0.6, 0.3, 0.2]]],
    lengths=[[2], [3]],
    terminated=[[False], [False]],
    truncated=[[False], [False]],
    bootstrap=[[NAN], [1.0]],
)


def test_hand_worked_two_turns_with_token_discount():
    # gamma_tok = lam_tok = 0.5, so gamma_tok * lam_tok = 0.25.
    # Turn 1 (batch end: V'_0 = 1.0, A'_0 = 0):
    #   k=2: delta = 2 + 0.9*1.0 - 0.2 = 2.7                A2 = 2.7
    #   k=1: delta = 0 + 0.5*0.2 - 0.3 = -0.2               A1 = -0.2 + 0.25*2.7 = 0.475
    #   k=0: delta = 0 + 0.5*0.3 - 0.6 = -0.45              A0 = -0.45 + 0.25*0.475 = -0.33125
    # Turn 0 (V'_0 = 0.6, A'_0 = -0.33125):
    #   k=1: delta = 1 + 0.9*0.6 - 0.4 = 1.14               A1 = 1.14 + 0.9*0.8*(-0.33125) = 0.9015
    #   k=0: delta = 0 + 0.5*0.4 - 0.5 = -0.3               A0 = -0.3 + 0.25*0.9015 = -0.074625
    # Returns = A + V: turn 0 [0.425375, 1.3015, 0], turn 1 [0.26875, 0.775, 2.9]
    adv, ret = _both(_batch(**HAND), 0.9, 0.8, 0.5, 0.5)
    expected_adv = torch.tensor([[[-0.074625, 0.9015, 0.0]], [[-0.33125, 0.475, 2.7]]], dtype=F64)
    expected_ret = torch.tensor([[[0.425375, 1.3015, 0.0]], [[0.26875, 0.775, 2.9]]], dtype=F64)
    torch.testing.assert_close(adv, expected_adv, atol=1e-12, rtol=0)
    torch.testing.assert_close(ret, expected_ret, atol=1e-12, rtol=0)


def test_hand_worked_two_turns_without_token_discount():
    # gamma_tok = lam_tok = 1.
    # Turn 1: k=2: A2 = 2.7 (as above)
    #         k=1: delta = 0 + 0.2 - 0.3 = -0.1             A1 = -0.1 + 2.7 = 2.6
    #         k=0: delta = 0 + 0.3 - 0.6 = -0.3             A0 = -0.3 + 2.6 = 2.3
    #   (check: sum r + 0.9*V_boot - V_k = 2 + 0.9 - 0.6 = 2.3 at k=0)
    # Turn 0: k=1: delta = 1.14                             A1 = 1.14 + 0.72*2.3 = 2.796
    #         k=0: delta = 0 + 0.4 - 0.5 = -0.1             A0 = -0.1 + 2.796 = 2.696
    #   (turn-level GAE: 1 + 0.9*0.6 - 0.5 + 0.72*2.3 = 2.696)
    adv, ret = _both(_batch(**HAND), 0.9, 0.8, 1.0, 1.0)
    expected_adv = torch.tensor([[[2.696, 2.796, 0.0]], [[2.3, 2.6, 2.7]]], dtype=F64)
    torch.testing.assert_close(adv, expected_adv, atol=1e-12, rtol=0)
    values = torch.tensor([[[0.5, 0.4, 0.0]], [[0.6, 0.3, 0.2]]], dtype=F64)
    torch.testing.assert_close(ret, expected_adv + values, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------------------
# Random batches against the slow reference
# --------------------------------------------------------------------------------------
def _random_batch(gen, T, N, R, dtype=F64, p_term=0.2, p_trunc=0.2):
    lengths = torch.randint(1, R + 1, (T, N), generator=gen)
    # make sure full-length responses (L = R) appear often
    full = torch.rand(T, N, generator=gen) < 0.3
    lengths = torch.where(full, torch.full_like(lengths, R), lengths)
    mask = torch.arange(R) < lengths.unsqueeze(-1)
    rewards = torch.randn(T, N, R, generator=gen, dtype=dtype)
    values = torch.randn(T, N, R, generator=gen, dtype=dtype)
    # padding must not matter: fill it with garbage
    rewards = torch.where(mask, rewards, torch.full_like(rewards, 1e6))
    values = torch.where(mask, values, torch.full_like(values, -1e6))
    terminated = torch.rand(T, N, generator=gen) < p_term
    truncated = torch.rand(T, N, generator=gen) < p_trunc
    bootstrap = torch.randn(T, N, generator=gen, dtype=dtype)
    return rewards, values, mask, terminated, truncated, bootstrap


def _random_gammas(gen):
    g = torch.rand(4, generator=gen, dtype=F64).tolist()
    # include the edge values 0 and 1 now and then
    choice = torch.randint(0, 6, (4,), generator=gen).tolist()
    return [0.0 if c == 0 else 1.0 if c == 1 else x for c, x in zip(choice, g)]


def test_matches_reference_on_1200_random_batches():
    gen = torch.Generator().manual_seed(1234)
    for _ in range(1200):
        T, N, R = (int(x) for x in torch.randint(1, 7, (3,), generator=gen))
        batch = _random_batch(gen, T, N, R)
        gammas = _random_gammas(gen)
        adv, ret = dual_discount_gae(*batch, *gammas)
        adv_ref, ret_ref = reference_dual_discount_gae(*batch, *gammas)
        torch.testing.assert_close(adv, adv_ref, atol=1e-6, rtol=0)
        torch.testing.assert_close(ret, ret_ref, atol=1e-6, rtol=0)


def test_unit_token_discounts_match_reference_on_600_random_batches():
    """gamma_token = lam_token = 1 (every recipe) takes its own telescoped path; check it on its own."""
    gen = torch.Generator().manual_seed(4321)
    for _ in range(600):
        T, N, R = (int(x) for x in torch.randint(1, 7, (3,), generator=gen))
        batch = _random_batch(gen, T, N, R)
        gammas = _random_gammas(gen)[:2] + [1.0, 1.0]
        adv, ret = dual_discount_gae(*batch, *gammas)
        adv_ref, ret_ref = reference_dual_discount_gae(*batch, *gammas)
        torch.testing.assert_close(adv, adv_ref, atol=1e-6, rtol=0)
        torch.testing.assert_close(ret, ret_ref, atol=1e-6, rtol=0)


def test_long_responses_and_float32_keep_dtype():
    gen = torch.Generator().manual_seed(7)
    batch = _random_batch(gen, 3, 4, 300, dtype=torch.float32)
    adv, ret = dual_discount_gae(*batch, 0.99, 0.95, 0.999, 0.97)
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    adv_ref, ret_ref = reference_dual_discount_gae(*batch, 0.99, 0.95, 0.999, 0.97)
    torch.testing.assert_close(adv, adv_ref, atol=2e-4, rtol=1e-5)
    torch.testing.assert_close(ret, ret_ref, atol=2e-4, rtol=1e-5)


def test_outputs_zero_outside_mask_and_no_grad():
    gen = torch.Generator().manual_seed(3)
    r, v, mask, term, trunc, boot = _random_batch(gen, 4, 3, 5)
    v.requires_grad_(True)
    adv, ret = dual_discount_gae(r, v, mask, term, trunc, boot, 0.9, 0.9, 0.9, 0.9)
    assert not adv.requires_grad and not ret.requires_grad
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()


# --------------------------------------------------------------------------------------
# gamma_tok = lam_tok = 1 reduces to ordinary turn-level GAE minus each token's value offset
# --------------------------------------------------------------------------------------
def _turn_level_gae(turn_rewards, turn_values, terminated, truncated, bootstrap, gamma, lam):
    """Independent textbook GAE over turns for one env (lists of floats)."""
    T = len(turn_rewards)
    adv = [0.0] * T
    running = 0.0
    for t in reversed(range(T)):
        if terminated[t]:
            next_value, running = 0.0, 0.0
        elif truncated[t] or t == T - 1:
            next_value, running = bootstrap[t], 0.0
        else:
            next_value = turn_values[t + 1]
        delta = turn_rewards[t] + gamma * next_value - turn_values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv


@pytest.mark.parametrize("reward_on_last_token_only", [True, False])
def test_unit_token_discount_reduces_to_turn_level_gae(reward_on_last_token_only):
    # With gamma_tok = lam_tok = 1: A_k = A_turn + V_0 - V_k - sum_{j<k} r_j, where A_turn is
    # ordinary GAE over turns with the turn's summed reward. When the reward sits on the last
    # token only (the env reward, no per-token penalty) the sum vanishes: A_k = A_turn + V_0 - V_k.
    gen = torch.Generator().manual_seed(99)
    for _ in range(200):
        T, N, R = (int(x) for x in torch.randint(1, 8, (3,), generator=gen))
        r, v, mask, term, trunc, boot = _random_batch(gen, T, N, R)
        if reward_on_last_token_only:
            is_last = torch.arange(R) == (mask.sum(-1, keepdim=True) - 1)
            r = torch.where(is_last, r, torch.zeros_like(r))
        g, lam = torch.rand(2, generator=gen).tolist()
        adv, _ = dual_discount_gae(r, v, mask, term, trunc, boot, g, lam, 1.0, 1.0)
        for n in range(N):
            turn_r = [float(r[t, n][mask[t, n]].sum()) for t in range(T)]
            turn_v = [float(v[t, n, 0]) for t in range(T)]
            a_turn = _turn_level_gae(
                turn_r, turn_v, term[:, n].tolist(), trunc[:, n].tolist(), boot[:, n].tolist(), g, lam
            )
            for t in range(T):
                L = int(mask[t, n].sum())
                earlier = [float(r[t, n, :k].sum()) for k in range(L)]
                if reward_on_last_token_only:
                    assert earlier == [0.0] * L
                expected = torch.tensor(
                    [a_turn[t] + turn_v[t] - float(v[t, n, k]) - earlier[k] for k in range(L)], dtype=F64
                )
                torch.testing.assert_close(adv[t, n, :L], expected, atol=1e-9, rtol=0)


# --------------------------------------------------------------------------------------
# Episode boundaries: terminated vs truncated vs batch end, isolated (R = 1, L = 1)
# --------------------------------------------------------------------------------------
def _two_turns(term0, trunc0, boot0, boot1=5.0, r1=3.0, v1=2.0):
    # turn 0: r = 1, V = 0.5;  turn 1: r = r1, V = v1
    return _batch(
        [[[1.0]], [[r1]]], [[[0.5]], [[v1]]], [[1], [1]],
        [[term0], [False]], [[trunc0], [False]], [[boot0], [boot1]],
    )


G, LAM = 0.9, 0.5


def test_continuing_episode_links_to_next_turn():
    # turn 1 (batch end): A = 3 + 0.9*5 - 2 = 5.5
    # turn 0: A = 1 + 0.9*2 - 0.5 + 0.9*0.5*5.5 = 2.3 + 2.475 = 4.775
    adv, _ = _both(_two_turns(False, False, NAN), G, LAM, 1.0, 1.0)
    assert adv[1, 0, 0].item() == pytest.approx(5.5)
    assert adv[0, 0, 0].item() == pytest.approx(4.775)


def test_terminated_uses_neither_bootstrap_nor_next_turn():
    # A = r - V = 1 - 0.5, whatever the next turn or the bootstrap value hold
    for r1, v1 in [(3.0, 2.0), (-7.0, 11.0)]:
        adv, _ = _both(_two_turns(True, False, NAN, r1=r1, v1=v1), G, LAM, 1.0, 1.0)
        assert adv[0, 0, 0].item() == pytest.approx(0.5)


def test_truncated_bootstraps_without_next_turn_advantage():
    # A = 1 + 0.9*4 - 0.5 = 4.1; independent of the next turn (a new episode)
    for r1, v1 in [(3.0, 2.0), (-7.0, 11.0)]:
        adv, _ = _both(_two_turns(False, True, 4.0, r1=r1, v1=v1), G, LAM, 1.0, 1.0)
        assert adv[0, 0, 0].item() == pytest.approx(4.1)


def test_terminated_and_truncated_counts_as_terminated():
    adv, _ = _both(_two_turns(True, True, 4.0), G, LAM, 1.0, 1.0)
    assert adv[0, 0, 0].item() == pytest.approx(0.5)


def test_batch_end_bootstraps_and_terminal_batch_end_does_not():
    # last turn, not terminated: A = 3 + 0.9*5 - 2 = 5.5 (checked above); terminated: 3 - 2 = 1
    b = list(_two_turns(False, False, NAN))
    b[3] = torch.tensor([[False], [True]])
    b[5] = torch.tensor([[NAN], [NAN]], dtype=F64)  # never read
    adv, _ = _both(tuple(b), G, LAM, 1.0, 1.0)
    assert adv[1, 0, 0].item() == pytest.approx(1.0)
    # turn 0 still links to turn 1: 2.3 + 0.45*1 = 2.75
    assert adv[0, 0, 0].item() == pytest.approx(2.75)


def test_bootstrap_values_read_only_where_chain_leaves_batch():
    gen = torch.Generator().manual_seed(5)
    r, v, mask, term, trunc, boot = _random_batch(gen, 6, 5, 4)
    adv, _ = dual_discount_gae(r, v, mask, term, trunc, boot, 0.9, 0.9, 0.9, 0.9)
    used = (trunc | (torch.arange(6) == 5).unsqueeze(-1)) & ~term
    boot2 = torch.where(used, boot, torch.full_like(boot, NAN))
    adv2, _ = dual_discount_gae(r, v, mask, term, trunc, boot2, 0.9, 0.9, 0.9, 0.9)
    torch.testing.assert_close(adv, adv2, atol=0, rtol=0)


def test_envs_are_independent():
    gen = torch.Generator().manual_seed(11)
    batch = _random_batch(gen, 5, 4, 6)
    adv, _ = dual_discount_gae(*batch, 0.95, 0.9, 0.8, 0.7)
    sub = tuple(x[:, 2:3] for x in batch)
    adv_sub, _ = dual_discount_gae(*sub, 0.95, 0.9, 0.8, 0.7)
    torch.testing.assert_close(adv[:, 2:3], adv_sub, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------
def _ok():
    return list(_batch(**{**HAND, "bootstrap": [[0.0], [1.0]], "rewards": [[[0.0, 1.0, 0.0]], [[0.0, 0.0, 2.0]]],
                          "values": [[[0.5, 0.4, 0.0]], [[0.6, 0.3, 0.2]]]}))


@pytest.mark.parametrize(
    "index, bad, exc, msg",
    [
        (0, torch.zeros(2, 1, 4, dtype=F64), ValueError, "rewards must have the shape"),
        (1, torch.zeros(2, 3, dtype=F64), ValueError, r"values must have shape \[T, N, R\]"),
        (3, torch.zeros(2, 2, dtype=torch.bool), ValueError, "terminated must have shape"),
        (5, torch.zeros(2, dtype=F64), ValueError, "bootstrap_values must have shape"),
        (2, torch.ones(2, 1, 3), TypeError, "response_mask must be a bool"),
        (4, torch.zeros(2, 1), TypeError, "truncated must be a bool"),
        (0, torch.zeros(2, 1, 3, dtype=torch.float32), TypeError, "rewards must have the dtype of values"),
        (0, [[0.0]], TypeError, "rewards must be a torch.Tensor"),
    ],
)
def test_bad_shapes_and_types_raise(index, bad, exc, msg):
    args = _ok()
    args[index] = bad
    with pytest.raises(exc, match=msg):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


def test_empty_response_raises():
    args = _ok()
    args[2] = args[2].clone()
    args[2][1, 0] = False
    with pytest.raises(ValueError, match=r"empty response: response_mask\[1, 0\]"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)
    with pytest.raises(ValueError, match="empty response"):
        reference_dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


def test_non_left_aligned_mask_raises():
    args = _ok()
    args[2] = torch.tensor([[[True, False, True]], [[True, True, True]]])
    with pytest.raises(ValueError, match="not left-aligned"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


@pytest.mark.parametrize("R", [2, 3, 8, 9, 64])
def test_non_left_aligned_mask_is_found_in_any_row_and_at_either_end(R):
    gen = torch.Generator().manual_seed(R)
    rewards, values, mask, terminated, truncated, bootstrap = _random_batch(gen, 3, 4, R)
    dual_discount_gae(rewards, values, mask, terminated, truncated, bootstrap, 0.9, 0.9, 1.0, 1.0)  # aligned
    for gap in range(1, R):  # row [2, 3] all valid but for one hole at slot gap - 1
        bad = mask.clone()
        bad[2, 3] = True
        bad[2, 3, gap - 1] = False  # a valid token at slot `gap` right after the padding slot gap - 1
        with pytest.raises(ValueError, match=rf"not left-aligned: response_mask\[2, 3, {gap}\] is True"):
            dual_discount_gae(rewards, values, bad, terminated, truncated, bootstrap, 0.9, 0.9, 1.0, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("gammas", [(0.9, 0.8, 1.0, 1.0), (0.9, 0.8, 0.95, 0.9)])
def test_nan_and_inf_in_padding_are_ignored_bit_for_bit(dtype, gammas):
    """Padding may hold anything (NaN, inf, -0.0): the outputs are exactly those of the same batch
    with zeros there, and exactly +0.0 on padding."""
    gen = torch.Generator().manual_seed(11)
    rewards, values, mask, terminated, truncated, bootstrap = _random_batch(gen, 5, 6, 7, dtype=dtype)
    garbage = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e30], dtype=dtype)
    pick = torch.randint(0, len(garbage), rewards.shape, generator=gen)
    dirty_r = torch.where(mask, rewards, garbage[pick])
    dirty_v = torch.where(mask, values, garbage[pick.flip(-1)])
    clean = dual_discount_gae(torch.where(mask, rewards, 0), torch.where(mask, values, 0), mask, terminated,
                              truncated, bootstrap, *gammas)
    dirty = dual_discount_gae(dirty_r, dirty_v, mask, terminated, truncated, bootstrap, *gammas)
    for a, b in zip(clean, dirty):
        assert torch.equal(a, b)
        pad = b[~mask]
        assert torch.equal(pad, torch.zeros_like(pad)) and not bool(torch.signbit(pad).any())


def test_empty_batch_raises():
    args = [x[:0] for x in _ok()]
    with pytest.raises(ValueError, match="empty batch"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


@pytest.mark.parametrize("gammas", [(1.1, 0.9, 1.0, 1.0), (0.9, -0.1, 1.0, 1.0), (0.9, 0.9, math.nan, 1.0)])
def test_discount_out_of_range_raises(gammas):
    with pytest.raises(ValueError, match="must be in \\[0, 1\\]"):
        dual_discount_gae(*_ok(), *gammas)


def test_non_finite_used_entries_raise():
    args = _ok()
    args[1] = args[1].clone()
    args[1][0, 0, 1] = math.inf
    with pytest.raises(ValueError, match="values contain NaN or inf"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)
    args = _ok()
    args[5] = torch.tensor([[0.0], [NAN]], dtype=F64)  # batch-end bootstrap is used
    with pytest.raises(ValueError, match="bootstrap_values contain NaN"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


def test_overflow_of_finite_inputs_raises():
    args = _ok()
    args[0] = torch.full((2, 1, 3), 1.5e308, dtype=F64)  # finite, but their sum is not
    with pytest.raises(ValueError, match="overflowed to inf"):
        dual_discount_gae(*args, 0.9, 0.9, 1.0, 1.0)


def test_reference_and_padded_share_the_signature_of_the_fast_gae():
    fast = inspect.signature(dual_discount_gae)
    assert inspect.signature(reference_dual_discount_gae) == fast
    padded = list(inspect.signature(padded_dual_discount_gae).parameters.values())
    assert [p.name for p in padded] == [*list(fast.parameters)[:6], "turn_mask", *list(fast.parameters)[6:]]
    assert [p for p in padded if p.name != "turn_mask"] == list(fast.parameters.values())


@pytest.mark.parametrize("index, name", [(0, "gamma_step"), (1, "lam_step"), (2, "gamma_token"), (3, "lam_token")])
def test_each_discount_is_checked_by_name_in_both_gaes(index, name):
    gammas = [0.9, 0.9, 1.0, 1.0]
    gammas[index] = 1.5
    for gae in (dual_discount_gae, reference_dual_discount_gae):
        with pytest.raises(ValueError, match=f"{name} must be in \\[0, 1\\], got 1.5"):
            gae(*_ok(), *gammas)
