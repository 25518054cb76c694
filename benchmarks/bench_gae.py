"""Time the batched dual-discount GAE against the scalar Python reference.

    python benchmarks/bench_gae.py [--turns 32 --envs 128 --tokens 256 --device cpu]

Builds one random fixed-turn batch (T turns x N envs x R token slots, random response
lengths in [1, R] including full-length ones, random terminated/truncated flags), times the
batched ``dual_discount_gae`` (median of --repeats runs after --warmup untimed runs) and the reference
``reference_dual_discount_gae`` once, checks that both agree, and prints one result line.

The reference is first timed on a few envs to estimate its cost. If the whole batch would
take longer than --reference-budget seconds, it runs on the first n envs only (envs are
independent, so this is an exact sub-problem) and its time is scaled by
(all turns / subset turns); the result line then says "reference on a subset ... scaled".
Exit status 1 when the outputs disagree.

On a small shared VM the batched time is noisy: a run that lands on freshly mapped memory
pages can be 10-30x slower for a while; the line prints the median and the min, so check
both (and re-run) before quoting a ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from verlog.algos.gae import dual_discount_gae, reference_dual_discount_gae  # noqa: E402

TOL = {torch.float32: 1e-3, torch.float64: 1e-9}  # max |diff|, relative to max |advantage|


def make_batch(T: int, N: int, R: int, dtype: torch.dtype, device: str, seed: int):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (T, N), generator=gen)
    lengths[torch.rand(T, N, generator=gen) < 0.1] = R
    mask = torch.arange(R) < lengths.unsqueeze(-1)
    rewards = torch.zeros(T, N, R, dtype=dtype)
    rewards += 0.01 * torch.randn(T, N, R, generator=gen, dtype=dtype)  # a per-token penalty
    rewards[mask & (torch.arange(R) == (lengths - 1).unsqueeze(-1))] += torch.rand(T * N, generator=gen, dtype=dtype)
    values = torch.randn(T, N, R, generator=gen, dtype=dtype)
    terminated = torch.rand(T, N, generator=gen) < 0.05
    truncated = torch.rand(T, N, generator=gen) < 0.02
    bootstrap = torch.randn(T, N, generator=gen, dtype=dtype)
    return tuple(x.to(device) for x in (rewards, values, mask, terminated, truncated, bootstrap))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_batched(batch, gammas, device: str, repeats: int, warmup: int) -> tuple[float, float]:
    """(median, min) seconds per call, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        dual_discount_gae(*batch, *gammas)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        dual_discount_gae(*batch, *gammas)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def time_reference(batch, gammas) -> tuple[float, tuple[torch.Tensor, torch.Tensor]]:
    t0 = time.perf_counter()
    out = reference_dual_discount_gae(*batch, *gammas)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=32, help="T, turns per env (default 32)")
    p.add_argument("--envs", type=int, default=128, help="N, environments (default 128)")
    p.add_argument("--tokens", type=int, default=256, help="R, response token slots (default 256)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] for the batched version")
    p.add_argument("--repeats", type=int, default=30, help="timed runs of the batched version (median)")
    p.add_argument(
        "--warmup", type=int, default=10,
        help="untimed runs first (fresh memory pages make the first calls slow, 10x in a small VM)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--reference-budget", type=float, default=60.0, help="seconds the reference may take")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gamma-step", type=float, default=0.99)
    p.add_argument("--lam-step", type=float, default=0.95)
    p.add_argument("--gamma-token", type=float, default=1.0, help="default 1 (Verlog's recipes)")
    p.add_argument("--lam-token", type=float, default=1.0, help="default 1; < 1 takes the slower general scan")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    T, N, R = args.turns, args.envs, args.tokens
    gammas = (args.gamma_step, args.lam_step, args.gamma_token, args.lam_token)

    batch = make_batch(T, N, R, dtype, args.device, args.seed)
    t_batched, t_min = time_batched(batch, gammas, args.device, args.repeats, args.warmup)

    # Estimate the reference's cost on a few envs, then run it on all envs or on a subset.
    probe_envs = min(N, 4)
    t_probe, _ = time_reference(tuple(x[:, :probe_envs] for x in batch), gammas)
    est_full = t_probe * N / probe_envs
    n_ref = N if est_full <= args.reference_budget else max(1, int(N * args.reference_budget / est_full))
    sub = tuple(x[:, :n_ref] for x in batch)
    t_ref_sub, (adv_ref, ret_ref) = time_reference(sub, gammas)
    t_ref = t_ref_sub * N / n_ref  # turns scale with envs (T fixed)

    adv, ret = dual_discount_gae(*sub, *gammas)
    scale = max(1.0, float(adv_ref.abs().max()), float(ret_ref.abs().max()))
    max_diff = max(float((adv.cpu() - adv_ref.cpu()).abs().max()), float((ret.cpu() - ret_ref.cpu()).abs().max()))
    ok = max_diff <= TOL[dtype] * scale

    tokens = int(batch[2].sum())
    ref_note = "reference on full batch" if n_ref == N else f"reference on a subset of {n_ref}/{N} envs, time scaled x{N / n_ref:.2f}"
    print(
        f"bench_gae: T={T} N={N} R={R} ({T * N} turns, {tokens} valid tokens, {args.dtype}, {args.device}, "
        f"{torch.get_num_threads()} threads, gamma/lam step {gammas[0]}/{gammas[1]} token {gammas[2]}/{gammas[3]}): batched {t_batched * 1e3:.2f} ms (median; min {t_min * 1e3:.2f}), reference {t_ref:.2f} s "
        f"({ref_note}) -> speedup {t_ref / t_batched:.0f}x (goal >= 100x); "
        f"max |diff| {max_diff:.2e} -> {'AGREE' if ok else 'DISAGREE'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
