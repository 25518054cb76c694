"""P3 GAE: the batched dual-discount GAE against the scalar Python reference, timed in pairs.

    python benchmarks/bench_gae.py [--turns 32 --envs 128 --tokens 256 --device cpu --pairs 5 --threads 1]
    python benchmarks/bench_gae.py --quick   # T=4, N=8, R=16: does it still run, and agree

Builds one random fixed-turn batch (T turns x N envs x R token slots, random response lengths in
[1, R] including full-length ones, random terminated/truncated flags), checks that the batched
``dual_discount_gae`` and the reference ``reference_dual_discount_gae`` agree on it, then times them
interleaved (:mod:`paired`), after ``--warmup`` untimed batched calls: each pair is A = ``--repeats``
batched calls (seconds per call: their time / repeats, so a few-millisecond call is not timed alone)
and B = one reference call. The ratio of a pair is reference seconds / batched seconds per call (the
speed-up; goal >= 100x); the result is the median of the per-pair ratios with their min-max.

The reference is first timed on a few envs to estimate its cost. If the whole batch would take longer
than --reference-budget seconds a call, it runs on the first n envs only (envs are independent, so
this is an exact sub-problem) and its time is scaled by (all turns / subset turns); the figures line
then says "reference on a subset ... scaled". Exit status 1, before any timing, when the outputs disagree.

The thread count is fixed (``--threads``, default 1, sets ``OMP_NUM_THREADS`` before torch is imported
and ``torch.set_num_threads``): at torch's default threads on a shared 2-core machine each op's second
OpenMP thread waits for a core and the batched version slows ~10x. On a small shared VM a call that
lands on freshly mapped memory pages can also be 10-30x slower for a while (hence the warm-up).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Result, add_common_args, preset_threads, report, set_threads, threads_note, timed  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before torch is imported
import torch  # noqa: E402

from paired import interleave, spread  # noqa: E402
from verlog.algos.gae import dual_discount_gae, reference_dual_discount_gae  # noqa: E402

GOAL = ">= 100x"
TOL = {torch.float32: 1e-3, torch.float64: 1e-9}  # max |diff|, relative to max |advantage|


def make_batch(T: int, N: int, R: int, dtype: torch.dtype, device: str, seed: int):
    """A random fixed-turn batch: (rewards, values, mask, terminated, truncated, bootstrap), [T, N(, R)]."""
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


def batched_seconds(batch, gammas, device: str, repeats: int) -> float:
    """Seconds per batched call, over ``repeats`` calls in a row."""
    def calls() -> None:
        _sync(device)
        for _ in range(repeats):
            dual_discount_gae(*batch, *gammas)
        _sync(device)
    return timed(calls) / repeats


def reference_subset(batch, gammas, budget: float) -> int:
    """How many envs the reference runs on: all, unless the probe on 4 envs says that would take
    longer than ``budget`` seconds."""
    n = batch[0].shape[1]
    probe = min(n, 4)
    est_full = timed(lambda: reference_dual_discount_gae(*(x[:, :probe] for x in batch), *gammas)) * n / probe
    return n if est_full <= budget else max(1, int(n * budget / est_full))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=32, help="T, turns per env (default 32)")
    p.add_argument("--envs", type=int, default=128, help="N, environments (default 128)")
    p.add_argument("--tokens", type=int, default=256, help="R, response token slots (default 256)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] for the batched version")
    p.add_argument("--repeats", type=int, default=30, help="batched calls per timed A side (default 30)")
    p.add_argument(
        "--warmup", type=int, default=10,
        help="untimed batched calls first (fresh memory pages make the first calls slow, 10x in a small VM)",
    )
    add_common_args(p)
    p.add_argument("--quick", action="store_true", help="smallest run: T=4, N=8, R=16, 3 repeats, 1 warm-up call")
    p.add_argument("--reference-budget", type=float, default=60.0,
                   help="seconds a reference call may take (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gamma-step", type=float, default=0.99)
    p.add_argument("--lam-step", type=float, default=0.95)
    p.add_argument("--gamma-token", type=float, default=1.0, help="default 1 (Verlog's recipes)")
    p.add_argument("--lam-token", type=float, default=1.0, help="default 1; < 1 takes the slower general scan")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.envs, args.tokens, args.repeats, args.warmup = 4, 8, 16, 3, 1
    set_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    T, N, R = args.turns, args.envs, args.tokens
    gammas = (args.gamma_step, args.lam_step, args.gamma_token, args.lam_token)
    batch = make_batch(T, N, R, dtype, args.device, args.seed)

    n_ref = reference_subset(batch, gammas, args.reference_budget)
    sub = tuple(x[:, :n_ref] for x in batch)
    adv_ref, ret_ref = reference_dual_discount_gae(*sub, *gammas)
    adv, ret = dual_discount_gae(*sub, *gammas)
    scale = max(1.0, float(adv_ref.abs().max()), float(ret_ref.abs().max()))
    max_diff = max(float((adv.cpu() - adv_ref.cpu()).abs().max()), float((ret.cpu() - ret_ref.cpu()).abs().max()))
    if max_diff > TOL[dtype] * scale:
        print(f"bench_gae: the batched GAE and the reference DISAGREE (max |diff| {max_diff:.2e}); no result")
        return 1

    for _ in range(args.warmup):
        dual_discount_gae(*batch, *gammas)
    times = interleave(lambda: batched_seconds(batch, gammas, args.device, args.repeats),
                       lambda: timed(lambda: reference_dual_discount_gae(*sub, *gammas)) * N / n_ref,
                       pairs=args.pairs, warmup=0)  # warmed up above: the batched calls, the reference's check
    t_batched, t_ref = spread(times.a).median, spread(times.b).median

    tokens = int(batch[2].sum())
    ref_note = "reference on full batch" if n_ref == N else f"reference on a subset of {n_ref}/{N} envs, time scaled x{N / n_ref:.2f}"
    print(
        f"bench_gae: T={T} N={N} R={R} ({T * N} turns, {tokens} valid tokens, {args.dtype}, {args.device}, "
        f"{threads_note(torch.get_num_threads())}, gamma/lam step {gammas[0]}/{gammas[1]} "
        f"token {gammas[2]}/{gammas[3]}): "
        f"batched {t_batched * 1e3:.2f} ms a call (median over pairs of {args.repeats} calls), reference "
        f"{t_ref:.3g} s ({ref_note}); max |diff| {max_diff:.2e} -> AGREE"
    )
    report(Result.of("P3", "gae", f"batched {t_batched * 1e3:.2f} ms vs reference {t_ref:.3g} s a call",
                     GOAL, times.rate_ratios(), torch.get_num_threads()), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
