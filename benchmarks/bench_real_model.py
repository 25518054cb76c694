"""P6 real model: per-phase costs of training SmolLM2-135M-Instruct, each beside bare torch / transformers.

    python benchmarks/bench_real_model.py [--model smollm2-135m-instruct] [--threads 1] [--turns 8]
        [--pairs 5] [--trainable-layers K] [--quick] [key=value ...]

One batch of N turns (``--turns``, default 8): N real BabyAI ``babyai/easy_goto`` prompts as Verlog's
memory renders them in training (brief instruction style, one history turn; ~100-130 tokens with the
SmolLM2 tokenizer), picked evenly from random-play episodes (:func:`verlog.warmup.collect_prompts`),
with greedy replies of at most 12 tokens. Every phase of a training iteration is timed on those
turns twice, Verlog's way (A) and the bare way (B), interleaved A B A B ... (``--pairs`` pairs after
one untimed pair; :mod:`paired`):

* **rollout**: A = Verlog's rollout engine as a run builds it (``engine_lifecycle.make_rollout_engine``,
  the HF engine) ``generate`` on the N prompts; B = ``model.generate`` of transformers on the same
  model object, greedy, the same ``max_new_tokens``, left padding and eos, with ``output_logits`` and
  one log_softmax gather for the behaviour logprobs a rollout must return. Both must produce the same
  tokens (checked).
* **scoring**: A = ``scoring.turn_rows`` + ``scoring.score_batch`` (actor logprobs and critic values of
  the response tokens, Verlog's micro-batches) on the actor and critic engines that
  ``training_models.build_training_models`` makes; B = one ``no_grad`` forward of the same actor and
  critic networks on the same packed rows, the response positions gathered, one log_softmax gather.
  Both must give the same logprobs (checked).
* **update**: A = one PPO epoch as Verlog runs it (``update.update``: its minibatches, micro-batches,
  ``optimizer_step`` on the engines, the actor and critic losses of ``algos/objectives.py``, metrics);
  B = fresh plain copies of the same actor and critic (the same trainable parameters), torch AdamW with
  the same learning rates, the same row permutation and minibatches, per micro-batch a forward, a
  plain clipped-surrogate loss (actor) or squared error (critic) written here, a backward; per
  minibatch gradient clipping and an optimizer step. Both start every call from the same shuffling
  state.

For each phase: seconds per turn of each side (median over the pairs / N) and the median of the
per-pair ratios A / B with their min-max (1.00: no framework overhead). The last line is the result
line of ``make bench-quick``'s format (:mod:`perfbench`; ``--json PATH`` also writes it as JSON); its
ratio is the median of the per-pair ratios of the summed phases, with their min-max (goal <= 1.10). The
project's target is <= 1 s of wall-clock per turn end to end on 2 cores; the summed A seconds per
turn are what these three phases take of it (environment steps and weight sync not included).

``--threads`` (default 1) sets ``OMP_NUM_THREADS`` before torch is imported and
``torch.set_num_threads``; the machine load (``os.getloadavg``) is printed with the figures.
``--trainable-layers K`` trains only the top K decoder layers (and the final norm) on both sides,
through the config key ``model.trainable_layers`` (the bare side trains the parameters Verlog's engines
train). ``model.cache_frozen_activations=true`` (with it) makes Verlog's scoring compute the frozen
layers' output once for actor and critic and its update epochs run only the top layers from it, as a
run does; the bare side still runs every layer, so the ratio shows the saving. ``--model``: a model directory, or a name that Verlog resolves (``builders.base_model_path``). ``key=value`` arguments override the
config (the default recipe with the settings above).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Result, add_common_args, load_note, preset_threads, report, set_threads, tiny_config  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="model directory, or a name Verlog resolves (default smollm2-135m-instruct)")
    p.add_argument("--turns", type=int, default=8, help="N: turns (prompts) of the batch (default 8)")
    add_common_args(p)
    p.add_argument("--max-new-tokens", type=int, default=12, help="most tokens per reply (default 12)")
    p.add_argument("--minibatches", type=int, default=1, help="optimizer steps of the epoch (default 1)")
    p.add_argument("--micro-batch-size", type=int, default=8, help="rows per forward/backward pass (default 8)")
    p.add_argument("--trainable-layers", type=int, default=None,
                   help="train only the top K decoder layers on both sides (default: all weights)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 turns, 3 pairs")
    p.add_argument("overrides", nargs="*", help="more config overrides, key=value")
    return p


if __name__ == "__main__":  # the thread count must reach OpenMP before torch is imported
    preset_threads()

import gc  # noqa: E402
import resource  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

from paired import PairedTimes, paired_times, spread  # noqa: E402
from verlog import distributed as D  # noqa: E402
from verlog import training_models  # noqa: E402
from verlog import update as U  # noqa: E402
from verlog.advantages import compute_advantages  # noqa: E402
from verlog.algos.registry import ALGORITHMS  # noqa: E402
from verlog.batch import TurnBatch  # noqa: E402
from verlog.builders import base_model_path, memory_factory  # noqa: E402
from verlog.config import TrainConfig  # noqa: E402
from verlog.engine_lifecycle import make_rollout_engine  # noqa: E402
from verlog.models import load_actor, load_critic, load_tokenizer  # noqa: E402
from verlog.rollout.engine import Generation, SamplingParams  # noqa: E402
from verlog.scoring import Rows, score_batch, turn_rows  # noqa: E402
from verlog.warmup import collect_prompts  # noqa: E402

GOAL = 1.10  # summed phases, Verlog / bare seconds
TARGET_S_PER_TURN = 1.0  # the project's end-to-end target on 2 cores


# ---------------------------------------------------------------------------------------------- set-up
def bench_config(args: argparse.Namespace) -> TrainConfig:
    """The default recipe set to this benchmark: easy_goto with brief instructions and one history
    turn, N envs x 1 turn, greedy-length replies, one PPO epoch, plain learning rates."""
    overrides = ["env.task=babyai/easy_goto", "env.instruction_style=brief", "env.vector_mode=sync",
                 "memory.history_turns=1", f"model.path={args.model}", f"env.num_envs={args.turns}",
                 "rollout.turns_per_env=1", f"rollout.max_response_tokens={args.max_new_tokens}",
                 "format_warmup.steps=0", "ppo.epochs=1", f"ppo.minibatches={args.minibatches}",
                 f"ppo.micro_batch_size={args.micro_batch_size}", "ppo.micro_batch_tokens=0",
                 "ppo.actor_lr=1e-6", "ppo.critic_lr=1e-5", "ppo.critic_warmup_iterations=0",
                 f"threads={args.threads}"]
    if args.trainable_layers is not None:
        overrides.append(f"model.trainable_layers={args.trainable_layers}")
    return tiny_config([*overrides, *args.overrides])


def model_dir(cfg: TrainConfig) -> str:
    """``model.path`` as a model directory: a directory as is, else what Verlog resolves the name to
    (``builders.base_model_path``, which converts a packaged model once where Verlog knows the name).

    Raises:
        SystemExit: the name resolves to no directory.
    """
    name = cfg.model.path
    if Path(name).is_dir():
        return name
    resolved = str(base_model_path(cfg))
    if not Path(resolved).is_dir():
        raise SystemExit(f"--model {name}: no such model directory, and this Verlog does not resolve the name")
    return resolved


def babyai_prompts(cfg: TrainConfig, tokenizer: Any, n: int) -> list[list[int]]:
    """``n`` prompt-id lists picked evenly from random-play episodes of ``cfg.env.task``, rendered by
    the configured memory exactly as in training."""
    examples = collect_prompts(cfg.env.task, memory_factory(cfg.memory, tokenizer), episodes=max(2, n),
                               seed=cfg.seed, env_kwargs=cfg.env.env_kwargs())
    step = len(examples) / n
    return [list(examples[int(i * step)].prompt_ids) for i in range(n)]


# ---------------------------------------------------------------------------------------------- bare sides
def bare_generate(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int, pad_id: int,
                  eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers ``generate``, greedy, left-padded: (new ids [B, L], their logprobs [B, L] float32)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attention[i, width - len(p):] = 1
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=eos_id, pad_token_id=pad_id, output_logits=True,
                             return_dict_in_generate=True)
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, 1).float()
        logprobs = logits.log_softmax(-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new, logprobs


def response_index(prompt_lengths: torch.Tensor, responses: int, width: int) -> torch.Tensor:
    """[M, R] long: the position whose output predicts response token k (prompt length - 1 + k)."""
    return (prompt_lengths.unsqueeze(1) - 1 + torch.arange(responses)).clamp(max=width - 1)


def bare_forward(model: torch.nn.Module, rows: Rows, index: torch.Tensor, actor: bool,
                 response_ids: torch.Tensor) -> torch.Tensor:
    """Actor: logprobs [M, R] of the response tokens; critic: values [M, R]."""
    out = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits
    if not actor:
        return out.squeeze(-1).gather(1, index)
    picked = out.gather(1, index.unsqueeze(-1).expand(-1, -1, out.shape[-1])).float()
    return picked.log_softmax(-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


def bare_scores(actor: torch.nn.Module, critic: torch.nn.Module, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, values) [M, R] of the packed rows, one no_grad forward of each network."""
    index = response_index(rows.prompt_lengths, rows.response_ids.shape[1], rows.input_ids.shape[1])
    with torch.no_grad():
        return (bare_forward(actor, rows, index, True, rows.response_ids),
                bare_forward(critic, rows, index, False, rows.response_ids))


def bare_epoch(models: tuple[torch.nn.Module, torch.nn.Module], optimizers: tuple[torch.optim.Optimizer, ...],
               data: U.TrainingRows, cfg: TrainConfig, rng_state: torch.Tensor) -> None:
    """One epoch of plain PPO: per minibatch, actor then critic, micro-batch forward/loss/backward,
    gradient clipping, one AdamW step. Loss: the clipped surrogate -min(r A, clip(r, 1-e, 1+e) A)
    (Schulman et al. 2017, eq. 7) and the squared error (V - return)^2, token means over the minibatch."""
    ppo, rows = cfg.ppo, data.rows
    gen = torch.Generator()
    gen.set_state(rng_state)
    for idx in torch.randperm(len(rows), generator=gen).tensor_split(ppo.minibatches):
        n_tokens = data.mask[idx].sum().clamp(min=1).float()
        for model, optimizer, actor in zip(models, optimizers, (True, False)):
            model.train()
            for mi in idx.split(ppo.micro_batch_size):
                width = int(rows.attention_mask[mi].sum(-1).max())
                micro = Rows(rows.input_ids[mi, :width], rows.attention_mask[mi, :width], rows.prompt_lengths[mi],
                             rows.response_ids[mi], rows.response_mask[mi])
                index = response_index(micro.prompt_lengths, micro.response_ids.shape[1], width)
                out = bare_forward(model, micro, index, actor, micro.response_ids)
                mask = data.mask[mi].float()
                if actor:
                    ratio = (out - data.old_logprobs[mi]).exp()
                    adv = data.advantages[mi]
                    per_token = -torch.min(ratio * adv, ratio.clamp(1 - ppo.clip_low, 1 + ppo.clip_high) * adv)
                else:
                    per_token = (out - data.returns[mi]) ** 2
                ((per_token * mask).sum() / n_tokens).backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], ppo.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def bare_copy(loaded: torch.nn.Module, like: torch.nn.Module) -> torch.nn.Module:
    """``loaded`` with the same parameters trainable as ``like`` (matched by name), in train mode."""
    trainable = {n for n, p in like.named_parameters() if p.requires_grad}
    for name, p in loaded.named_parameters():
        p.requires_grad_(name in trainable)
    return loaded.train()


# ---------------------------------------------------------------------------------------------- phases
def turn_batch(prompts: list[list[int]], gens: list[Generation], pad_id: int, max_tokens: int) -> TurnBatch:
    """The N turns as a T=1 x N batch, each ending its episode (rewards alternate 1, 0)."""
    n = len(prompts)
    one = lambda xs: [list(xs)]  # noqa: E731
    return TurnBatch.from_turns(
        one(prompts), one(g.token_ids for g in gens), one(g.logprobs for g in gens),
        one(float(i % 2 == 0) for i in range(n)), one([True] * n), one([False] * n), one(range(n)),
        one([True] * n), one(g.finish_reason == "length" for g in gens), {}, pad_id=pad_id,
        max_response_tokens=max_tokens)


def phase_rollout(cfg: TrainConfig, path: str, tokenizer: Any, prompts: list[list[int]],
                  pairs: int) -> tuple[PairedTimes, list[Generation]]:
    """Rollout: Verlog's engine vs bare ``generate`` on the engine's own model."""
    engine = make_rollout_engine(cfg, path, tokenizer, rank=0)
    params = SamplingParams(max_tokens=cfg.rollout.max_response_tokens, greedy=True)
    pad_id, eos_id = int(tokenizer.pad_token_id), int(tokenizer.eos_token_id)
    model = engine.model.eval()
    times = paired_times(lambda: engine.generate(prompts, params),
                         lambda: bare_generate(model, prompts, params.max_tokens, pad_id, eos_id), pairs=pairs)
    gens = engine.generate(prompts, params)
    new, _ = bare_generate(model, prompts, params.max_tokens, pad_id, eos_id)
    for i, g in enumerate(gens):
        if new[i, :len(g.token_ids)].tolist() != g.token_ids:
            raise SystemExit(f"rollout: the bare generate's reply {i} differs from the engine's")
    return times, gens


def phase_scoring(cfg: TrainConfig, models: Any, batch: TurnBatch, pairs: int) -> PairedTimes:
    """Scoring: ``turn_rows`` + ``score_batch`` vs bare forwards of the same networks."""
    rows = turn_rows(batch)
    actor, critic = models.actor.module.eval(), models.critic.module.eval()

    def verlog() -> Any:
        return score_batch(batch, models.turn_rows(batch, cfg.ppo.micro_batch_size), actor=models.actor, critic=models.critic,
                           reference=models.reference, micro_batch_size=cfg.ppo.micro_batch_size)

    times = paired_times(verlog, lambda: bare_scores(actor, critic, rows), pairs=pairs)
    scores, (logprobs, _) = verlog(), bare_scores(actor, critic, rows)
    mask = rows.response_mask
    if not torch.allclose(scores.old_logprobs[0][mask], logprobs[mask], atol=1e-3):
        raise SystemExit("scoring: the bare logprobs differ from score_batch's")
    return times


def phase_update(cfg: TrainConfig, path: str, models: Any, batch: TurnBatch, pairs: int) -> PairedTimes:
    """Update: one epoch of ``update.update`` vs the bare epoch, from the same shuffling state."""
    spec = ALGORITHMS[cfg.algo.algorithm]
    rows = models.turn_rows(batch, cfg.ppo.micro_batch_size)  # with the frozen hidden states, as scoring leaves them
    scores = score_batch(batch, rows, actor=models.actor, critic=models.critic, reference=models.reference,
                         micro_batch_size=cfg.ppo.micro_batch_size)
    advantages = compute_advantages(batch, scores, cfg)
    data = U.TrainingRows.of(batch, rows, scores, advantages)
    rng = torch.Generator().manual_seed(cfg.seed)
    rng_state = rng.get_state()
    skipped = U.SkippedSteps(cfg.deepspeed.zero_stage)
    aggregation = spec.loss_aggregation(cfg.algo.loss_aggregation)

    def verlog() -> None:
        rng.set_state(rng_state)
        U.update(U.TrainingRows.of(batch, rows, scores, advantages), actor=models.actor,
                 critic=models.critic, spec=spec, cfg=cfg.ppo, aggregation=aggregation, rng=rng, skipped=skipped,
                 train_actor=True, pad_id=batch.pad_id)

    dtype = models.actor.module.dtype
    bare = (bare_copy(load_actor(path, dtype=dtype), models.actor.module),
            bare_copy(load_critic(path, dtype=dtype, value_head_init_std=cfg.model.value_head_init_std),
                      models.critic.module))
    optimizers = tuple(torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=lr,
                                         weight_decay=cfg.ppo.weight_decay)
                       for m, lr in zip(bare, (cfg.ppo.actor_lr, cfg.ppo.critic_lr)))
    return paired_times(verlog, lambda: bare_epoch(bare, optimizers, data, cfg, rng_state), pairs=pairs)


# ---------------------------------------------------------------------------------------------- report
def phase_line(name: str, times: PairedTimes, turns: int) -> str:
    """One table row: seconds per turn of each side (median over pairs / N) and the per-pair ratios."""
    a, b = spread(times.a)[0] / turns, spread(times.b)[0] / turns
    med, lo, hi = spread(times.ratios())
    return f"{name:<9} {a:>13.3f} {b:>12.3f} {med:>7.2f} ({lo:.2f}-{hi:.2f})"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.turns, args.pairs = 2, 3
    set_threads(args.threads)
    transformers.logging.set_verbosity_error()  # no load reports or progress bars between the figures
    transformers.logging.disable_progress_bar()
    cfg = bench_config(args)
    torch.manual_seed(cfg.seed)
    path = model_dir(cfg)
    tokenizer = load_tokenizer(path)
    prompts = babyai_prompts(cfg, tokenizer, args.turns)
    n = len(prompts)

    t_rollout, gens = phase_rollout(cfg, path, tokenizer, prompts, args.pairs)
    gc.collect()  # the rollout engine's model is gone before the training models load
    batch = turn_batch(prompts, gens, int(tokenizer.pad_token_id), cfg.rollout.max_response_tokens)
    D.init_distributed()
    models = training_models.build_training_models(
        cfg, actor_path=path, critic_path=path, initial_path=path, needs_critic=True, turns_per_batch=n)
    t_scoring = phase_scoring(cfg, models, batch, args.pairs)
    t_update = phase_update(cfg, path, models, batch, args.pairs)

    actor = models.actor.module
    trainable = sum(p.numel() for p in actor.parameters() if p.requires_grad)
    total = sum(p.numel() for p in actor.parameters())
    lengths = [len(p) for p in prompts]
    replies = [len(g.token_ids) for g in gens]
    layers = "all" if args.trainable_layers is None else f"top {args.trainable_layers} (model.trainable_layers)"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"bench_real_model: {path}, {cfg.env.task} (brief instructions, {cfg.memory.history_turns} history turn), "
          f"{n} turns of {min(lengths)}-{max(lengths)} prompt tokens, replies {min(replies)}-{max(replies)} tokens "
          f"(<= {cfg.rollout.max_response_tokens}, greedy); update: {cfg.ppo.epochs} epoch x {cfg.ppo.minibatches} "
          f"minibatches, micro-batches of <= {cfg.ppo.micro_batch_size} rows, actor + critic "
          f"({type(models.actor).__name__}, ZeRO-{cfg.deepspeed.zero_stage}), trainable layers {layers}: "
          f"{trainable / 1e6:.1f}M of {total / 1e6:.1f}M actor weights; {torch.get_num_threads()} threads "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), {args.pairs} pairs A B per phase; "
          f"peak RSS {rss:.1f} GiB; {load_note()}")
    print(f"{'phase':<9} {'verlog s/turn':>13} {'bare s/turn':>12} {'ratio':>7} (min-max of the per-pair ratios)")
    total_times = t_rollout + t_scoring + t_update
    for name, times in (("rollout", t_rollout), ("scoring", t_scoring), ("update", t_update),
                        ("total", total_times)):
        print(phase_line(name, times, n))
    a, b = spread(total_times.a).median / n, spread(total_times.b).median / n
    report(Result.of("P6", "smollm", f"verlog {a:.2f} s/turn vs bare {b:.2f} s/turn for rollout + scoring + update "
                     f"(target <= {TARGET_S_PER_TURN:.0f} s/turn end to end)", f"<= {GOAL:.2f}", total_times.ratios(),
                     args.threads), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
