"""Dual-discount generalised advantage estimation over a (turn, env, token) batch.

The estimator is GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using
Generalized Advantage Estimation", eq. 16: A_t = sum_l (gamma*lambda)^l delta_{t+l}) applied
to a chain whose links carry two discounts, as in Verlog (Chen et al. 2025): (gamma_token,
lambda_token) between generated tokens of one turn, and (gamma_step, lambda_step) on the
jump from a turn's last response token to the next turn's turn value (the observation
tokens of the next prompt are skipped).

Notation (shapes): T turns, N environments, R response-token slots.

For turn t of environment n with L valid response tokens, values V_k (the critic's value of
the state *before* token k; V_0 is the turn value) and token rewards r_k:

* k < L-1:  delta_k = r_k + g_tok V_{k+1} - V_k,                  A_k = delta_k + g_tok l_tok A_{k+1}
* k = L-1:  delta   = r_{L-1} + g_step (1-d_t) V'_0 - V_{L-1},    A_{L-1} = delta + g_step l_step (1-d_t) A'_0

d_t = 1 only where the episode *terminated* after turn t. V'_0 and A'_0 are the next turn's
turn value and first-token advantage in the same episode (turn t+1 of env n). Where the
chain cannot continue inside the batch (t = T-1, or the episode was *truncated* after turn
t) V'_0 = bootstrap_values[t, n] and A'_0 = 0. Termination takes precedence: a turn that is
both terminated and truncated is treated as terminated (no bootstrap).

Unlike the reference implementation there is no post-EOS value position and truncation
bootstraps rather than being treated as termination.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["dual_discount_gae", "reference_dual_discount_gae", "padded_dual_discount_gae"]


def _check_discount(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(x).__name__}")
    x = float(x)
    if not (0.0 <= x <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {x}")
    return x


#: the four discounts of :func:`dual_discount_gae`, in its argument order
_DISCOUNTS = ("gamma_step", "lam_step", "gamma_token", "lam_token")


def _validate(rewards: Tensor, values: Tensor, response_mask: Tensor, terminated: Tensor, truncated: Tensor,
              bootstrap_values: Tensor, discounts: tuple[float, float, float, float]
              ) -> tuple[Tensor, tuple[float, float, float, float]]:
    """Check types, shapes, dtypes, devices, the mask's layout and the discounts.

    The tensors are :func:`dual_discount_gae`'s; ``discounts`` are its (gamma_step, lam_step,
    gamma_token, lam_token). Finiteness is checked separately (:func:`_check_finite`). Returns
    the response lengths L (int64 [T, N]) and the four discounts as Python floats. Raises
    TypeError/ValueError (see :func:`dual_discount_gae`).
    """
    tensors = {
        "rewards": rewards,
        "values": values,
        "response_mask": response_mask,
        "terminated": terminated,
        "truncated": truncated,
        "bootstrap_values": bootstrap_values,
    }
    for name, x in tensors.items():
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if values.dim() != 3:
        raise ValueError(f"values must have shape [T, N, R], got {tuple(values.shape)}")
    T, N, R = values.shape
    if T == 0 or N == 0 or R == 0:
        raise ValueError(f"empty batch: values has shape {tuple(values.shape)} (T, N, R must be >= 1)")
    for name in ("rewards", "response_mask"):
        if tensors[name].shape != values.shape:
            raise ValueError(
                f"{name} must have the shape of values {tuple(values.shape)}, got {tuple(tensors[name].shape)}"
            )
    for name in ("terminated", "truncated", "bootstrap_values"):
        if tensors[name].shape != (T, N):
            raise ValueError(f"{name} must have shape [T, N] = {(T, N)}, got {tuple(tensors[name].shape)}")
    for name in ("response_mask", "terminated", "truncated"):
        if tensors[name].dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got {tensors[name].dtype}")
    if values.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"values must be float32 or float64 (half precision is too coarse for GAE), got {values.dtype}")
    for name in ("rewards", "bootstrap_values"):
        if tensors[name].dtype != values.dtype:
            raise TypeError(f"{name} must have the dtype of values ({values.dtype}), got {tensors[name].dtype}")
    for name, x in tensors.items():
        if x.device != values.device:
            raise ValueError(f"{name} is on {x.device} but values is on {values.device}")
    g_step, l_step, g_tok, l_tok = (_check_discount(name, x) for name, x in zip(_DISCOUNTS, discounts, strict=True))

    bits = response_mask.view(torch.uint8)  # 0/1 bytes: integer ops on them run ~5x faster than bool ops on CPU
    lengths = bits.sum(dim=-1, dtype=torch.int64)
    if bool((lengths == 0).any()):
        t, n = (lengths == 0).nonzero()[0].tolist()
        raise ValueError(f"empty response: response_mask[{t}, {n}] has no valid token (every turn needs L >= 1)")
    if bool((bits[..., 1:] & (bits[..., :-1] ^ 1)).any()):  # a valid token right after a padding slot
        gaps = response_mask[..., 1:] > response_mask[..., :-1]
        t, n, k = gaps.nonzero()[0].tolist()
        raise ValueError(
            f"response_mask is not left-aligned: response_mask[{t}, {n}, {k + 1}] is True "
            f"but response_mask[{t}, {n}, {k}] is False"
        )
    return lengths, (g_step, l_step, g_tok, l_tok)


def _check_finite(
    rewards: Tensor, values: Tensor, response_mask: Tensor, terminated: Tensor, truncated: Tensor, bootstrap_values: Tensor
) -> None:
    """Raise ValueError naming the input that holds NaN/inf at an entry the recursion reads."""
    if not bool(torch.where(response_mask, rewards, 0).isfinite().all()):
        raise ValueError("rewards contain NaN or inf at valid (masked-in) positions")
    if not bool(torch.where(response_mask, values, 0).isfinite().all()):
        raise ValueError("values contain NaN or inf at valid (masked-in) positions")
    used = _bootstrap_used(terminated, truncated)
    if not bool(torch.where(used, bootstrap_values, 0).isfinite().all()):
        raise ValueError(
            "bootstrap_values contain NaN or inf where they are used (t = T-1 or truncated, not terminated)"
        )


def _bootstrap_used(terminated: Tensor, truncated: Tensor) -> Tensor:
    """Bool [T, N]: where the chain leaves the batch and bootstrap_values[t] is read."""
    leaves = truncated.clone()
    leaves[-1] = True
    return leaves & ~terminated


#: the integer type whose bits :func:`_zero_outside` masks, per float type
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}


def _keep_bits(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The integer mask of :func:`_zero_outside` for floats of ``dtype``: -1 (every bit set) where
    ``mask`` (bool, any shape) is True, 0 elsewhere, with ``mask``'s shape."""
    return mask.view(torch.uint8).to(_BITS[dtype]).neg_()


def _zero_outside(x: Tensor, keep: Tensor, out: Tensor | None = None) -> Tensor:
    """x where ``keep`` is -1 and +0.0 where it is 0, as a bitwise AND of the floats' bits.

    The same result as ``torch.where(mask, x, 0)`` bit for bit, NaN and inf outside the mask
    included (their bits are cleared like any other), but on CPU it takes about a quarter of
    the time: torch's ``where`` on a bool condition is not vectorised there. ``keep`` comes
    from :func:`_keep_bits` (int32 for float32, int64 for float64, broadcastable to x);
    ``out`` (float, shaped like x, may be x itself) receives the result.
    """
    bits = _BITS[x.dtype]
    if out is None:
        return torch.bitwise_and(x.view(bits), keep).view(x.dtype)
    torch.bitwise_and(x.view(bits), keep, out=out.view(bits))
    return out


def _reverse_linear_scan(x: Tensor, m: float | Tensor, work: Tensor | None = None) -> Tensor:
    """Solve y_k = x_k + m_k y_{k+1} along the last dim (y_{K-1} = x_{K-1}).

    ``m`` is a float in [0, 1] (the same multiplier everywhere) or a tensor shaped like x
    (m_{K-1} is unused). ``x`` and the optional scratch tensor ``work`` (shaped like x) are
    overwritten and the result is one of them (no other large allocation).

    m = 1: a reverse cumulative sum, y_k = total - cumsum_k + x_k (exact where x is 0 to the
    right; elsewhere it may lose a few ulps of |total| to cancellation). Otherwise a
    Hillis-Steele scan: after the pass with shift s, y_k sums x_k .. x_{k+2s-1}, each
    weighted by the product of the multipliers between. ceil(log2 K) vectorised passes and
    only products of multipliers (no division), so it is as stable as the sequential
    recursion. A float multiplier stops early once its power is exactly 0.
    """
    K = x.shape[-1]
    if not isinstance(m, float):
        s = 1
        while s < K:
            x[..., : K - s] += m[..., : K - s] * x[..., s:]  # the right-hand side is materialised first
            m = torch.cat((m[..., : K - s] * m[..., s:], m[..., K - s :]), dim=-1)
            s *= 2
        return x
    work = torch.empty_like(x) if work is None else work
    if m == 1.0:
        torch.cumsum(x, dim=-1, out=work)
        return x.sub_(work).add_(work[..., -1:])
    s = 1
    while s < K and m != 0.0:
        torch.add(x[..., : K - s], x[..., s:], alpha=m, out=work[..., : K - s])
        work[..., K - s :] = x[..., K - s :]
        x, work = work, x
        m, s = m * m, 2 * s
    return x


@torch.no_grad()
def dual_discount_gae(
    rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    bootstrap_values: Tensor,
    gamma_step: float,
    lam_step: float,
    gamma_token: float,
    lam_token: float,
) -> tuple[Tensor, Tensor]:
    """Dual-discount GAE advantages and returns for a fixed-turn batch (vectorised).

    GAE (Schulman et al. 2016, eq. 16) over the token chain of each environment, with token
    discounts inside a turn and step discounts across turns (Verlog, Chen et al. 2025); the
    recursion is stated in this module's docstring. No Python loop over turns, envs or
    tokens: both recurrences are solved with O(log) vectorised scan passes.

    Method: with c = gamma_token * lam_token, A_k = sum_{j>=k} c^(j-k) delta'_j where
    delta' is delta plus, on the last token, the carry g_step l_step (1-d_t) A'_0. The
    first-token advantages are linear in the carries, A_0 = sum_k c^k delta_k +
    c^(L-1) carry, a first-order linear recurrence over turns solved by a scan; then one
    scan over tokens gives all advantages. With c = 1 (gamma_token = lam_token = 1) the values
    of a turn telescope and the returns are one reverse cumulative sum of the rewards
    (:func:`_unit_token_discount_gae`).

    Args:
        rewards: float [T, N, R], token rewards r_k (env reward on the last valid token plus
            any per-token penalty). Entries where ``response_mask`` is False are ignored.
        values: float [T, N, R], V_k = critic value of the state before token k (V_0 is the
            turn value, at the last prompt token). Entries outside the mask are ignored.
        response_mask: bool [T, N, R], left-aligned: tokens 0..L-1 valid, L >= 1.
        terminated: bool [T, N], the episode really ended after turn t (gymnasium meaning).
        truncated: bool [T, N], the episode was cut after turn t (time limit); bootstraps.
        bootstrap_values: float [T, N], the critic's value of the observation that followed
            turn t; read only where t = T-1 or truncated[t] (and not terminated[t]).
        gamma_step, lam_step: discount and GAE lambda across turns, each in [0, 1].
        gamma_token, lam_token: discount and GAE lambda between tokens of a turn, in [0, 1].

    Returns:
        (advantages, returns), each [T, N, R] with the dtype and device of ``values``;
        returns = advantages + values (unwhitened critic targets); both are 0 where
        ``response_mask`` is False. Computed under ``torch.no_grad()`` (no graph is kept).

    Raises:
        TypeError: a non-tensor argument, a mask/flag that is not bool, values not float32
            or float64, rewards/bootstrap_values of another dtype, or a non-float discount.
        ValueError: wrong shapes, an empty batch, a response with L = 0, a mask that is not
            left-aligned, tensors on different devices, a discount outside [0, 1], or NaN/inf
            in an entry that is read (checked on the result; the message names the input),
            or an overflow to inf.
    """
    lengths, (g_step, l_step, g_tok, l_tok) = _validate(rewards, values, response_mask, terminated, truncated,
                                                        bootstrap_values, (gamma_step, lam_step, gamma_token, lam_token))
    mask = response_mask

    # V'_0 per turn, already multiplied by (1 - d_t): next turn's turn value where the chain
    # continues, the bootstrap value where it leaves the batch, 0 after termination.
    leaves = _bootstrap_used(terminated, truncated) | terminated
    next_turn_value = torch.zeros_like(bootstrap_values)
    next_turn_value[:-1] = values[1:, :, 0]
    v_next_turn = torch.where(leaves, bootstrap_values, next_turn_value)
    v_next_turn = torch.where(terminated, 0, v_next_turn)  # unused entries may be NaN

    c = g_tok * l_tok
    link = (g_step * l_step) * (~leaves).to(values.dtype)  # 0 where the chain leaves the turn
    if c == 1.0:
        advantages, returns = _unit_token_discount_gae(rewards, values, mask, lengths, v_next_turn, link, g_step)
    else:
        advantages, returns = _token_discount_gae(rewards, values, mask, lengths, v_next_turn, link, g_step, g_tok, c)
    if not bool(torch.isfinite(advantages.sum())):
        _check_finite(rewards, values, response_mask, terminated, truncated, bootstrap_values)
        raise ValueError("advantages overflowed to inf (inputs are finite but too large)")
    return advantages, returns


def _token_discount_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, lengths: Tensor, v_next_turn: Tensor, link: Tensor,
    g_step: float, g_tok: float, c: float,
) -> tuple[Tensor, Tensor]:
    """The general case of :func:`dual_discount_gae` (c = gamma_token * lambda_token < 1), see its Method.

    Arguments as computed by the caller: ``lengths`` [T, N], ``v_next_turn`` = (1 - d_t) V'_0,
    ``link`` = g_step l_step where the chain continues in the batch, else 0.
    """
    R = values.shape[-1]
    dtype, device = values.dtype, values.device
    last = (lengths - 1).unsqueeze(-1)
    # Discounted next value: g_tok V_{k+1} inside the turn, g_step (1-d_t) V'_0 at k = L-1.
    # Padding slots of the inputs may hold garbage: they only reach padding slots of delta,
    # which the where() zeroes. (Large temporaries are reused: on CPU, fresh allocations
    # and their page faults cost more than the arithmetic.)
    work = torch.empty_like(values)  # next value, then scratch
    torch.mul(values[..., 1:], g_tok, out=work[..., :-1])
    work[..., -1] = 0
    work.scatter_(-1, last, (g_step * v_next_turn).unsqueeze(-1))
    delta = torch.sub(rewards, values).add_(work)
    keep = _keep_bits(mask, dtype)
    _zero_outside(delta, keep, out=delta)

    # First-token advantages without carries; then A0[t] = local0[t] + c^(L-1) link[t] A0[t+1]
    # solved over turns; then each carry link[t] A0[t+1] joins its turn's last-token delta.
    c_pow = (c ** torch.arange(R, device=device, dtype=torch.float64)).to(dtype)  # c^k
    local0 = torch.mul(delta, c_pow, out=work).sum(-1)  # [T, N]
    a0 = _reverse_linear_scan(local0.T.contiguous(), (c_pow[lengths - 1] * link).T.contiguous()).T  # [T, N]
    carry = torch.zeros_like(a0)
    carry[:-1] = link[:-1] * a0[1:]

    delta.scatter_add_(-1, last, carry.unsqueeze(-1))
    advantages = _reverse_linear_scan(delta, c, work)  # 0 on padding: only zeros to its right
    returns = _zero_outside(values, keep).add_(advantages)
    return advantages, returns


def _unit_token_discount_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, lengths: Tensor, v_next_turn: Tensor, link: Tensor, g_step: float
) -> tuple[Tensor, Tensor]:
    """The gamma_token = lambda_token = 1 case of :func:`dual_discount_gae` (Verlog's recipes), in fewer passes.

    With unit token discounts the values inside a turn telescope: sum_{j>=k} delta_j =
    sum_{j>=k} r_j + g_step V'_0 - V_k. So with tail_t = g_step V'_0 + carry_t (carry_t = the
    step link times the next turn's first-token advantage), the return of token k is
    R_k = sum_{j>=k} r_j + tail_t, one reverse cumulative sum of the masked rewards with the tail
    added on the last valid token (exactly 0 on padding: only zeros lie to its right), and
    A_k = R_k - V_k. The first-token advantages solve A0[t] = local0[t] + link[t] A0[t+1] over
    turns with local0 = sum_k r_k + g_step V'_0 - V_0. Arguments as computed by the caller:
    ``lengths`` [T, N], ``v_next_turn`` = (1 - d_t) V'_0, ``link`` = g_step l_step where the chain
    continues in the batch, else 0.
    """
    keep = _keep_bits(mask, rewards.dtype)
    suffix = _zero_outside(rewards, keep)
    local0 = suffix.sum(-1).add_(v_next_turn, alpha=g_step).sub_(values[..., 0])  # sum_k delta_k, [T, N]
    a0 = _reverse_linear_scan(local0.T.contiguous(), link.T.contiguous()).T  # [T, N]
    tail = g_step * v_next_turn
    tail[:-1] += link[:-1] * a0[1:]
    suffix.scatter_add_(-1, (lengths - 1).unsqueeze(-1), tail.unsqueeze(-1))
    work = torch.empty_like(suffix)  # the scan's scratch, then the advantages (one fresh allocation fewer)
    returns = _reverse_linear_scan(suffix, 1.0, work)
    advantages = torch.sub(returns, values, out=work)
    _zero_outside(advantages, keep, out=advantages)
    return advantages, returns


def reference_dual_discount_gae(rewards: Tensor, values: Tensor, response_mask: Tensor, terminated: Tensor,
                                truncated: Tensor, bootstrap_values: Tensor, gamma_step: float, lam_step: float,
                                gamma_token: float, lam_token: float) -> tuple[Tensor, Tensor]:
    """Slow scalar reference of :func:`dual_discount_gae` (same signature, same result).

    Plain Python loops over envs n, turns t (last to first) and tokens k (last to first),
    in float64 arithmetic, writing out the recursion of GAE (Schulman et al. 2016, eq. 16)
    with Verlog's dual discounts (Chen et al. 2025) line by line. For tests and benchmarks.

    Args/Returns/Raises: as :func:`dual_discount_gae` (the same validation runs first).
    """
    _, (g_step, l_step, g_tok, l_tok) = _validate(rewards, values, response_mask, terminated, truncated,
                                                  bootstrap_values, (gamma_step, lam_step, gamma_token, lam_token))
    _check_finite(rewards, values, response_mask, terminated, truncated, bootstrap_values)
    T, N, R = values.shape
    r = rewards.detach().double().cpu().tolist()
    v = values.detach().double().cpu().tolist()
    m = response_mask.cpu().tolist()
    term = terminated.cpu().tolist()
    trunc = truncated.cpu().tolist()
    boot = bootstrap_values.detach().double().cpu().tolist()

    adv = [[[0.0] * R for _ in range(N)] for _ in range(T)]
    for n in range(N):
        for t in range(T - 1, -1, -1):
            L = sum(m[t][n])
            if term[t][n]:
                not_done, v_next, a_next = 0.0, 0.0, 0.0
            elif trunc[t][n] or t == T - 1:
                not_done, v_next, a_next = 1.0, boot[t][n], 0.0
            else:
                not_done, v_next, a_next = 1.0, v[t + 1][n][0], adv[t + 1][n][0]
            for k in range(L - 1, -1, -1):
                if k == L - 1:
                    delta = r[t][n][k] + g_step * not_done * v_next - v[t][n][k]
                    adv[t][n][k] = delta + g_step * l_step * not_done * a_next
                else:
                    delta = r[t][n][k] + g_tok * v[t][n][k + 1] - v[t][n][k]
                    adv[t][n][k] = delta + g_tok * l_tok * adv[t][n][k + 1]

    ret = [
        [[adv[t][n][k] + v[t][n][k] if m[t][n][k] else 0.0 for k in range(R)] for n in range(N)]
        for t in range(T)
    ]
    out_adv = torch.tensor(adv, dtype=torch.float64).to(dtype=values.dtype, device=values.device)
    out_ret = torch.tensor(ret, dtype=torch.float64).to(dtype=values.dtype, device=values.device)
    return out_adv, out_ret


def padded_dual_discount_gae(rewards: Tensor, values: Tensor, response_mask: Tensor, terminated: Tensor,
                             truncated: Tensor, bootstrap_values: Tensor, turn_mask: Tensor, gamma_step: float,
                             lam_step: float, gamma_token: float, lam_token: float) -> tuple[Tensor, Tensor]:
    """:func:`dual_discount_gae` on a whole-episode batch whose shorter episodes end in padding turns.

    A padding turn (``turn_mask`` False) has no response token; it may only follow a terminated
    turn or another padding turn of its env, so no real turn reads it. It is given one dummy token
    (reward 0, value 0) and marked terminated, the GAE runs, and its outputs are zeroed: every real
    turn gets exactly what :func:`dual_discount_gae` gives the episode without its padding.

    Args:
        turn_mask: bool [T, N], True on real turns; the other arguments as :func:`dual_discount_gae`
            (rewards and values must be 0 on padding turns).

    Returns:
        (advantages, returns) [T, N, R], 0 on padding turns and outside ``response_mask``.

    Raises:
        ValueError: a padding turn with response tokens, a non-zero reward or value, or one that
            follows a real turn that is not terminated; else what :func:`dual_discount_gae` raises.
    """
    pad = ~turn_mask.to(torch.bool)
    if not bool(pad.any()):
        return dual_discount_gae(rewards, values, response_mask, terminated, truncated, bootstrap_values,
                                 gamma_step, lam_step, gamma_token, lam_token)
    if bool((response_mask.any(-1) & pad).any()):
        raise ValueError("padded_dual_discount_gae: a padding turn has response tokens")
    if bool(((rewards != 0).any(-1) & pad).any() or ((values != 0).any(-1) & pad).any()):
        raise ValueError("padded_dual_discount_gae: a padding turn has a non-zero reward or value")
    after_open_turn = pad[1:] & ~pad[:-1] & ~terminated[:-1]
    if bool(pad[0].any()) or bool(after_open_turn.any()):
        raise ValueError("padded_dual_discount_gae: a padding turn must follow a terminated or padding turn")
    mask = response_mask.clone()
    mask[..., 0] |= pad
    advantages, returns = dual_discount_gae(rewards, values, mask, terminated | pad, truncated & ~pad,
                                            bootstrap_values, gamma_step, lam_step, gamma_token, lam_token)
    real = response_mask
    return advantages.masked_fill_(~real, 0), returns.masked_fill_(~real, 0)
