"""P4 update: PPO update tokens/s against a bare torch training loop on the same tokens, timed in pairs.

    python benchmarks/bench_update.py [--pairs 5 --num-envs 8 --turns 16 --threads 1] [--quick] [key=value ...]

Builds a :class:`verlog.trainer.Trainer` from the default recipe (``recipes/tiny.yaml``, without the
format warm-up, sync envs, run directory in a temporary folder) on a smaller batch: by default
8 envs x 16 turns = 128 rows, ``ppo.epochs=2`` and ``ppo.minibatches=2``, so every minibatch is one
full micro-batch of the recipe's 64 rows (the recipe's 4 x 8 steps on 512 rows take minutes on a
loaded 2-core machine; ``key=value`` overrides restore any of it). It collects one batch, scores it
and computes its advantages (all untimed). Then, on that batch, it times two sides interleaved,
A B A B ... (:mod:`paired`, one untimed pair first; ``threads`` set to ``--threads``):

* A, **update**: ``Trainer.update(batch, rows, train_actor=True)``: ``ppo.epochs`` x ``ppo.minibatches``
  optimizer steps of the actor and the critic DeepSpeed engines (micro-batches of
  ``ppo.micro_batch_size`` rows, PPO/value losses, metrics);
* B, **bare**: fresh plain-torch copies of the same models (the same initial weights), ``torch.optim.AdamW``
  with the same learning rates, the same permutations (every update, the trainer's and the bare
  ones, starts from the same update RNG state) and the same micro-batch split
  (``Trainer._micro_batches``) of the same rows; per micro-batch one forward, a minimal loss on
  the response tokens (mean -logprob for the actor, squared value for the critic), one backward;
  per minibatch gradient clipping and one optimizer step.

tokens/s = epochs x (prompt + response tokens of all rows) / seconds per update (both models). The
ratio of a pair is update / bare tokens/s (goal >= 0.80): what the engines, losses and metrics cost on
top of the arithmetic; the result is the median of the per-pair ratios with their min-max. The tiny
model makes per-step overheads weigh more than they would on a real model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import (Result, add_common_args, load_note, preset_threads, report, threads_note,  # noqa: E402
                       tiny_config)

preset_threads()  # OMP_NUM_THREADS before torch is imported
import torch  # noqa: E402

from paired import paired_times, spread  # noqa: E402
from verlog import update as U  # noqa: E402
from verlog.advantages import compute_advantages  # noqa: E402
from verlog.builders import tiny_model_dir  # noqa: E402
from verlog.collection import collect_batch  # noqa: E402
from verlog.models import load_actor, load_critic  # noqa: E402
from verlog.scoring import Rows, gather_response, score_batch, turn_rows  # noqa: E402
from verlog.trainer import Trainer  # noqa: E402

GOAL = 0.80


def prepared_rows(trainer: Trainer) -> U.TrainingRows:
    """One collected, scored batch with advantages, as the rows ``update`` consumes."""
    m = trainer.models
    batch, _, _ = collect_batch(trainer.collector, trainer.cfg, dynamic_sampling=False)
    rows = turn_rows(batch)
    scores = score_batch(batch, rows, actor=m.actor, critic=m.critic, reference=m.reference,
                         micro_batch_size=trainer.cfg.ppo.micro_batch_size)
    return U.TrainingRows.of(batch, rows, scores, compute_advantages(batch, scores, trainer.cfg))


def run_update(trainer: Trainer, data: U.TrainingRows) -> None:
    """One update of the trainer's actor and critic, as an iteration runs it."""
    U.update(data, actor=trainer.actor, critic=trainer.critic, spec=trainer.spec, cfg=trainer.cfg.ppo,
             aggregation=trainer.spec.loss_aggregation(trainer.cfg.algo.loss_aggregation), rng=trainer.update_rng,
             skipped=trainer.skipped, train_actor=True, pad_id=int(trainer.tokenizer.pad_token_id))


def bare_models(trainer: Trainer) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Fresh plain-torch actor and critic loaded as the trainer loads them (format warm-up off)."""
    path, dtype = tiny_model_dir(trainer.cfg), torch.float32
    actor = load_actor(path, dtype=dtype)
    critic = load_critic(path, dtype=dtype, value_head_init_std=trainer.cfg.model.value_head_init_std)
    return actor.train(), critic.train()


def bare_pass(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rows: Rows, micro: list[torch.Tensor],
              max_grad_norm: float, actor: bool) -> None:
    """One minibatch of the bare loop: forward + minimal loss + backward per micro-batch, then clip + step."""
    for mi in micro:
        r = rows.select(mi)
        out = model(input_ids=r.input_ids, attention_mask=r.attention_mask).logits
        mask = r.response_mask.float()
        if actor:
            logp = torch.log_softmax(gather_response(out, r).float(), -1)
            per_token = -logp.gather(-1, r.response_ids.unsqueeze(-1)).squeeze(-1)
        else:
            per_token = gather_response(out.squeeze(-1).float(), r) ** 2
        ((per_token * mask).sum() / mask.sum().clamp(min=1.0)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def bare_update(trainer: Trainer, models: tuple[torch.nn.Module, torch.nn.Module],
                optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer], rows: Rows,
                rng_state: torch.Tensor) -> None:
    """The update's epochs x minibatches on the bare models: same permutations, same micro-batches."""
    cfg = trainer.cfg.ppo
    gen = torch.Generator()
    gen.set_state(rng_state)
    lengths = rows.attention_mask.sum(-1)
    for _epoch in range(cfg.epochs):
        for idx in torch.randperm(len(rows), generator=gen).tensor_split(cfg.minibatches):
            micro = [mi for mi in U.micro_batches(idx, lengths, cfg).batches if mi.numel()]
            for model, optimizer, actor in zip(models, optimizers, (True, False)):
                bare_pass(model, optimizer, rows, micro, cfg.max_grad_norm, actor)


def bare_optimizers(trainer: Trainer,
                    models: tuple[torch.nn.Module, torch.nn.Module]) -> tuple[torch.optim.Optimizer, ...]:
    """torch AdamW for the bare actor and critic, with the trainer's learning rates and weight decay."""
    ppo = trainer.cfg.ppo
    return tuple(torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=ppo.weight_decay)
                 for m, lr in zip(models, (ppo.actor_lr, ppo.critic_lr)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=int, default=8, help="environments (default 8; the recipe has 32)")
    p.add_argument("--turns", type=int, default=None, help="turns per env (default: the recipe's, 16)")
    add_common_args(p)
    p.add_argument("--quick", action="store_true",
                   help="smallest run: 4 envs x 4 turns, 1 epoch x 2 minibatches of micro-batches of 4")
    p.add_argument("overrides", nargs="*", help="more recipe overrides, key=value")
    args = p.parse_args(argv)
    overrides = ["format_warmup.steps=0", "env.vector_mode=sync", "eval.baseline=false", "logging.progress=false",
                 "ppo.epochs=2", "ppo.minibatches=2", f"threads={args.threads}"]
    if args.quick:
        args.num_envs, args.turns = 4, 4
        overrides += ["ppo.epochs=1", "ppo.minibatches=2", "ppo.micro_batch_size=4"]
    if args.num_envs:
        overrides.append(f"env.num_envs={args.num_envs}")
    if args.turns:
        overrides.append(f"rollout.turns_per_env={args.turns}")
    with tempfile.TemporaryDirectory(prefix="bench_update_") as tmp:
        cfg = tiny_config([*overrides, f"run_root={tmp}", "name=bench_update", *args.overrides])
        trainer = Trainer(cfg)
        try:
            data = prepared_rows(trainer)
            rows = data.rows
            rng_state = trainer.update_rng.get_state()  # every update, A's and B's, draws the same permutations
            models = bare_models(trainer)
            optimizers = bare_optimizers(trainer, models)

            def update() -> None:
                trainer.update_rng.set_state(rng_state)
                run_update(trainer, data)

            times = paired_times(update, lambda: bare_update(trainer, models, optimizers, rows, rng_state),
                                 pairs=args.pairs)
        finally:
            trainer.collector.close()
    t_update, t_bare = spread(times.a).median, spread(times.b).median
    ppo = cfg.ppo
    tokens = ppo.epochs * int(rows.attention_mask.sum())
    first = torch.arange(len(rows)).tensor_split(ppo.minibatches)[0]
    n_micro = len(U.micro_batches(first, rows.attention_mask.sum(-1), ppo).batches)
    print(f"bench_update: {len(rows)} rows, {int(rows.attention_mask.sum())} tokens, {ppo.epochs} epochs x "
          f"{ppo.minibatches} minibatches x {n_micro} micro-batches of <= {ppo.micro_batch_size} rows, actor + critic, "
          f"ZeRO-{cfg.deepspeed.zero_stage}, {threads_note(torch.get_num_threads())}; update {t_update:.2f} s, bare "
          f"{t_bare:.2f} s (medians of {args.pairs} pairs); {load_note()}")
    report(Result.of("P4", "update", f"update {tokens / t_update:.0f} tokens/s vs bare torch {tokens / t_bare:.0f} "
                     f"tokens/s", f">= {GOAL:.2f}", times.rate_ratios(), torch.get_num_threads()), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
