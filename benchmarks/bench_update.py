"""P4 update: PPO update tokens/s against a bare torch training loop on the same tokens.

    python benchmarks/bench_update.py [--repeats 2 --num-envs 8 --turns 16] [--quick] [key=value ...]

Builds a :class:`verlog.trainer.Trainer` from the default recipe (``recipes/tiny.yaml``, without the
format warm-up, sync envs, run directory in a temporary folder) on a smaller batch: by default
8 envs x 16 turns = 128 rows, ``ppo.epochs=2`` and ``ppo.minibatches=2``, so every minibatch is one
full micro-batch of the recipe's 64 rows (the recipe's 4 x 8 steps on 512 rows take minutes on a
loaded 2-core machine; ``key=value`` overrides restore any of it). It collects one batch, scores it
and computes its advantages (all untimed). Then, on that batch:

* **update**: ``Trainer.update(batch, rows, train_actor=True)``: ``ppo.epochs`` x ``ppo.minibatches``
  optimizer steps of the actor and the critic DeepSpeed engines (micro-batches of
  ``ppo.micro_batch_size`` rows, PPO/value losses, metrics), timed ``--repeats`` times after one
  untimed warm-up call;
* **bare**: fresh plain-torch copies of the same models (the same initial weights), ``torch.optim.AdamW``
  with the same learning rates, the same permutations (every update, the trainer's and the bare
  ones, starts from the same update RNG state) and the same micro-batch split
  (``Trainer._micro_batches``) of the same rows; per micro-batch one forward, a minimal loss on
  the response tokens (mean -logprob for the actor, squared value for the critic), one backward;
  per minibatch gradient clipping and one optimizer step. Same warm-up and repeats.

tokens/s = epochs x (prompt + response tokens of all rows) / seconds per update (both models). The
ratio is update / bare tokens/s (goal >= 0.80): what the engines, losses and metrics cost on top of
the arithmetic. The tiny model makes per-step overheads weigh more than they would on a real model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from perfbench import load_note, result_line, tiny_config  # noqa: E402
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


def time_update(trainer: Trainer, data: U.TrainingRows, repeats: int, rng_state: torch.Tensor) -> list[float]:
    """Seconds of each of ``repeats`` timed ``update`` calls (after one untimed call); every call
    starts from the update RNG state ``rng_state``, so all draw the same permutations."""
    trainer.update_rng.set_state(rng_state)
    run_update(trainer, data)
    times = []
    for _ in range(repeats):
        trainer.update_rng.set_state(rng_state)
        tic = time.perf_counter()
        run_update(trainer, data)
        times.append(time.perf_counter() - tic)
    return times


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


def time_bare(trainer: Trainer, rows: Rows, repeats: int, rng_state: torch.Tensor) -> list[float]:
    """Seconds of each of ``repeats`` timed bare updates (after one untimed one)."""
    models = bare_models(trainer)
    ppo = trainer.cfg.ppo
    optimizers = tuple(torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=ppo.weight_decay)
                       for m, lr in zip(models, (ppo.actor_lr, ppo.critic_lr)))
    bare_update(trainer, models, optimizers, rows, rng_state)
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        bare_update(trainer, models, optimizers, rows, rng_state)
        times.append(time.perf_counter() - tic)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2, help="timed updates of each kind (median; default 2)")
    p.add_argument("--num-envs", type=int, default=8, help="environments (default 8; the recipe has 32)")
    p.add_argument("--turns", type=int, default=None, help="turns per env (default: the recipe's, 16)")
    p.add_argument("--quick", action="store_true",
                   help="smallest run: 4 envs x 4 turns, 1 epoch x 2 minibatches of micro-batches of 4, 1 repeat, "
                        "1 thread")
    p.add_argument("overrides", nargs="*", help="more recipe overrides, key=value")
    args = p.parse_args(argv)
    overrides = ["format_warmup.steps=0", "env.vector_mode=sync", "eval.baseline=false", "logging.progress=false",
                 "ppo.epochs=2", "ppo.minibatches=2"]
    if args.quick:
        args.repeats, args.num_envs, args.turns = 1, 4, 4
        overrides += ["ppo.epochs=1", "ppo.minibatches=2", "ppo.micro_batch_size=4", "threads=1"]
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
            rng_state = trainer.update_rng.get_state()
            t_update = statistics.median(time_update(trainer, data, args.repeats, rng_state))
            t_bare = statistics.median(time_bare(trainer, rows, args.repeats, rng_state))
        finally:
            trainer.collector.close()
    ppo = cfg.ppo
    tokens = ppo.epochs * int(rows.attention_mask.sum())
    first = torch.arange(len(rows)).tensor_split(ppo.minibatches)[0]
    n_micro = len(U.micro_batches(first, rows.attention_mask.sum(-1), ppo).batches)
    print(f"bench_update: {len(rows)} rows, {int(rows.attention_mask.sum())} tokens, {ppo.epochs} epochs x "
          f"{ppo.minibatches} minibatches x {n_micro} micro-batches of <= {ppo.micro_batch_size} rows, actor + critic, "
          f"ZeRO-{cfg.deepspeed.zero_stage}, {torch.get_num_threads()} threads; update {t_update:.2f} s, bare "
          f"{t_bare:.2f} s (median of {args.repeats}); {load_note()}")
    print(result_line("P4 update", f"update {tokens / t_update:.0f} tokens/s vs bare torch {tokens / t_bare:.0f} "
                      f"tokens/s", t_bare / t_update, f">= {GOAL:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
