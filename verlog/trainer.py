"""The training loop: collect, score, advantages, update, sync weights, log and checkpoint.

One iteration, as :meth:`Trainer.iteration` runs it:

1. **collect** a batch of turns from the collector (:mod:`verlog.collection`: T x N turns for PPO,
   grouped whole episodes for the critic-free algorithms, tool conversations for agents);
2. **score** it (:func:`~verlog.scoring.score_batch`): old logprobs of the actor, reference logprobs
   when a KL term is on, values V_k and bootstrap values of the critic;
3. **advantages** (:func:`~verlog.advantages.compute_advantages`): dual-discount GAE, or the
   algorithm's critic-free estimator;
4. **update** (:func:`~verlog.update.update`): ``ppo.epochs`` x ``ppo.minibatches`` optimizer steps of
   the actor (frozen during the first ``ppo.critic_warmup_iterations``) and the critic;
5. **sync** the actor's weights into the rollout engine (:mod:`verlog.engine_lifecycle`);
6. **log** the metrics (:mod:`verlog.metrics`), evaluate and **checkpoint** (:mod:`verlog.checkpointing`).

What an algorithm needs (a critic, grouped rollouts, state keys, its policy loss) is read from its
entry in :data:`verlog.algos.registry.ALGORITHMS`; the trainer never asks which collector it has.
"""

from __future__ import annotations

import json
import random
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verlog import distributed as D
from verlog.advantages import compute_advantages, scored_batch
from verlog.algos.registry import ALGORITHMS
from verlog.algos.staleness import decoupled_advantages
from verlog.builders import (base_model_path, check_model_sources, critic_base_path, eval_payload, evaluate_policy,
                             make_collector, memory_factory, run_format_warmup)
from verlog.checkpointing import (GENERATOR_NAMES, checkpoint_dir, newest_checkpoint, read_rank_state,
                                  read_trainer_state, save_checkpoint, select_checkpoint)
from verlog.collection import collect_batch
from verlog.config import ConfigError, TrainConfig, to_dict
from verlog.engine_lifecycle import RolloutLifecycle, make_rollout_engine
from verlog.evaluate import EvalResult
from verlog.logging import MetricLogger
from verlog.metrics import PhaseTimes, SuccessWindows, iteration_metrics, make_logger
from verlog.models import load_tokenizer
from verlog.prefetch import BatchPrefetcher
from verlog.preflight import check_buildable, check_distance_shaping, check_external_env, check_state_keys
from verlog.resume import StopSignals, load_rng_states, truncate_metrics
from verlog.run_dir import prepare_run_dir, run_dir_of
from verlog.scoring import score_batch
from verlog.training_models import build_training_models, set_optimizer_hyperparameters
from verlog.update import SkippedSteps, TrainingRows, update

__all__ = ["NumericalFault", "Trainer", "newest_checkpoint", "seed_everything"]


class NumericalFault(RuntimeError):
    """Too many optimizer steps in a row were skipped for non-finite values (a checkpoint was written)."""


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    """Turn-level PPO with a critic, or a critic-free algorithm; see the module docstring.

    Args:
        cfg: a validated :class:`~verlog.config.TrainConfig`.

    Raises:
        ConfigError: the recipe asks for more GPUs than the node has, or an algorithm the env cannot
            serve; the run name already holds a run (without ``resume`` or ``overwrite``); the run
            directory cannot be written (:func:`~verlog.run_dir.prepare_run_dir`).
        CheckpointError: ``resume`` names a run without a checkpoint that validates
            (:func:`~verlog.checkpointing.select_checkpoint`).
        ModelLoadError: the model cannot be loaded.
    """

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        try:
            D.require_gpus(cfg.gpus_per_node, f"recipe {cfg.name}")
        except RuntimeError as err:
            raise ConfigError(f"gpus_per_node: {err}") from None
        check_buildable(cfg)
        check_state_keys(cfg)
        check_distance_shaping(cfg)
        check_external_env(cfg)
        self.spec = ALGORITHMS[cfg.algo.algorithm]
        check_model_sources(cfg)  # fail fast, with one line, before any process group exists
        D.init_distributed()
        torch.set_num_threads(cfg.threads)
        self.rank, self.world = D.rank(), D.world_size()
        seed_everything(cfg.seed + 1000 * self.rank)
        engine_names = ["actor", "critic"] if self.spec.needs_critic else ["actor"]
        # Resume validates every file it will read before anything is written (a damaged newest
        # checkpoint is passed over with one line); the run directory is written only then.
        resume_from = select_checkpoint(run_dir_of(cfg), engines=engine_names) if cfg.resume else None
        self.run_dir = prepare_run_dir(cfg)
        trainer_state = read_trainer_state(resume_from) if resume_from is not None else {}
        self.start_iteration = int(trainer_state.get("iteration", 0))
        self.eval_results: dict[str, dict[str, Any]] = trainer_state.get("eval_results", {})

        base_path = base_model_path(cfg)
        self.tokenizer = load_tokenizer(base_path)
        make_memory = memory_factory(cfg.memory, self.tokenizer)
        # The initial policy: the KL reference, and where a fresh run's actor and critic start.
        initial_path = self.run_dir / "format_warmup" if cfg.format_warmup.steps > 0 else base_path
        if resume_from is None and cfg.format_warmup.steps > 0:
            run_format_warmup(cfg, self.tokenizer, make_memory, base_path, initial_path)
        actor_path = resume_from / "actor" if resume_from is not None else initial_path
        critic_base = critic_base_path(cfg)
        critic_path = resume_from / "critic" if resume_from is not None else critic_base or actor_path
        lora = cfg.model.lora_rank > 0
        if lora:  # adapters on the initial weights; a resume restores them from the DeepSpeed checkpoint
            actor_path, critic_path = initial_path, critic_base or initial_path
        self.models = build_training_models(cfg, actor_path=actor_path, critic_path=critic_path,
                                            initial_path=initial_path, needs_critic=self.spec.needs_critic,
                                            turns_per_batch=self.turns_per_batch, resume_from=resume_from)
        self.engine = make_rollout_engine(cfg, actor_path, self.tokenizer, rank=self.rank)
        self.rollout = RolloutLifecycle(self.engine, sleep_between_updates=cfg.rollout.vllm_sleep_between_updates,
                                        lora=lora)
        if lora and resume_from is not None:
            self.rollout.sync(self.models.actor.module)  # the engine started from the base weights
        # A resumed run re-creates the interrupted run's in-flight episodes (_load_rank_state).
        self.collector = make_collector(cfg, self.spec, self.engine, self.tokenizer, make_memory=make_memory,
                                        seed=cfg.seed * 100_003 + self.rank * 1009)
        # carried from iteration to iteration, and into checkpoints
        self.turns_done = self.start_iteration * self.turns_per_batch * self.world
        self.recent_success = SuccessWindows(100)
        self.skipped = SkippedSteps(cfg.deepspeed.zero_stage)
        self.update_rng = torch.Generator().manual_seed(cfg.seed + 7 * self.rank)
        self.prefetch = BatchPrefetcher(self.collector, self.engine.generator)  # rollout.max_staleness=1
        self.policy_version = 0  # actor updates loaded into the engine so far in this process
        self.stop_signals = StopSignals()  # SIGINT/SIGTERM during train(): stop after the iteration
        if resume_from is not None:
            self._load_rank_state(resume_from)

    @property
    def turns_per_batch(self) -> int:
        """T x N turns collected by this rank per iteration."""
        return self.cfg.rollout.turns_per_env * self.cfg.env.num_envs

    @property
    def actor(self) -> Any:
        """The actor's DeepSpeed engine."""
        return self.models.actor

    @property
    def critic(self) -> Any:
        """The critic's DeepSpeed engine (None for algorithms without a critic)."""
        return self.models.critic

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run (or continue) the configured iterations, then evaluate; returns ``eval.json``'s content.

        SIGINT/SIGTERM end the run after the current iteration with a checkpoint and return
        ``{"stopped": True, "iteration": k}`` (no evaluation); a second signal aborts at once.

        Raises:
            NumericalFault: more than ``ppo.max_skipped_steps`` optimizer steps in a row were
                skipped (a checkpoint of the iteration is written first).
        """
        cfg = self.cfg
        logger = make_logger(cfg, self.run_dir, self.start_iteration) if D.is_main() else None
        self.stop_signals.install()
        try:
            if self.start_iteration == 0 and cfg.eval.baseline and D.is_main():
                self._evaluate("untrained", logger, phase="baseline", iteration=0)
            if self.critic is None and cfg.ppo.critic_warmup_iterations:
                self._say(logger, f"ppo.critic_warmup_iterations={cfg.ppo.critic_warmup_iterations} not used: "
                                  f"algo.algorithm={cfg.algo.algorithm} trains no critic")
            last = cfg.iterations
            for it in range(self.start_iteration, cfg.iterations):
                if logger is not None:
                    logger.phase(self.phase_of(it))
                metrics = self.iteration(it, logger)
                if logger is not None:
                    logger.log(metrics)
                saved = bool(cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0 and it + 1 < cfg.iterations)
                if saved:
                    self.save_checkpoint(it + 1)
                if self.skipped.consecutive() > cfg.ppo.max_skipped_steps:
                    ckpt = self.save_checkpoint(it + 1) if not saved else checkpoint_dir(self.run_dir, it + 1)
                    raise NumericalFault(
                        f"{self.skipped.consecutive()} optimizer steps in a row were skipped for a non-finite "
                        f"loss or gradient norm (ppo.max_skipped_steps={cfg.ppo.max_skipped_steps}); stopped after "
                        f"iteration {it + 1} with a checkpoint in {ckpt}")
                if D.any_rank(self.stop_signals.requested is not None):  # all ranks stop after the same iteration
                    if not saved:
                        self.save_checkpoint(it + 1)
                    self._say(logger, f"stopped by {self.stop_signals.requested or 'a signal on another rank'} after "
                                      f"iteration {it + 1}; resume with: {self.resume_command()}")
                    return {"stopped": True, "iteration": it + 1}
                if cfg.turn_budget and self.turns_done >= cfg.turn_budget:
                    last = it + 1
                    self._say(logger, f"turn budget reached: {self.turns_done} turns after iteration {last}")
                    break
            self.save_checkpoint(last)
            if D.is_main():
                self._evaluate("trained", logger, phase="final_eval", iteration=last)
                (self.run_dir / "eval.json").write_text(json.dumps(eval_payload(cfg, self.eval_results), indent=2))
        finally:
            self.stop_signals.restore()
            if logger is not None:
                logger.close()
            self.prefetch.close()
            self.collector.close()
        return json.loads((self.run_dir / "eval.json").read_text()) if D.is_main() else {}

    def iteration(self, it: int, logger: MetricLogger | None = None) -> dict[str, Any]:
        """Run iteration ``it`` (0-based): collect (or take the batch collected during the last update), score,
        advantages, update, sync; returns its metrics row."""
        cfg, models = self.cfg, self.models
        warm = self.phase_of(it) == "critic_warmup"
        times = PhaseTimes()
        collect = lambda: collect_batch(  # noqa: E731
            self.collector, cfg, dynamic_sampling=self.spec.uses_dynamic_sampling(cfg.algo.dynamic_sampling))
        temperature = cfg.rollout.policy_temperature_at(it + 1)  # the batch of iteration it is sampled at it
        if cfg.ppo.kl_coef_schedule:  # this iteration's KL weight, in the advantages and the update alike
            cfg = replace(cfg, ppo=replace(cfg.ppo, kl_coef=cfg.ppo.kl_coef_at(it + 1)))
        if cfg.ppo.actor_lr_schedule:  # this iteration's actor learning rate
            set_optimizer_hyperparameters(models.actor, lr=cfg.ppo.actor_lr_at(it + 1),
                                          weight_decay=cfg.ppo.weight_decay)
        with times.phase("rollout"):  # with a batch collected during the last update: the wait for it
            if self.prefetch.pending:
                (batch, stats, algo_metrics), version = self.prefetch.take()
            else:
                self._sample_at(it)
                (batch, stats, algo_metrics), version = collect(), self.policy_version
        staleness = self.policy_version - version
        if self._collect_ahead(it):
            self._sample_at(it + 1)
            self.prefetch.start(collect, version=self.policy_version)
        if self.rollout.sleep_between_updates:  # free the KV cache and weights for the update
            with times.phase("engine_sleep"):
                self.rollout.release()
        turns = int(D.sum_over_ranks(stats.turns))
        scores = adv = None
        if D.min_over_ranks(batch.num_real_turns) > 0:
            with times.phase("scoring"):
                rows = models.turn_rows(batch, cfg.ppo.micro_batch_size)
                scores = score_batch(batch, rows, actor=models.actor, critic=models.critic,
                                     reference=models.reference, micro_batch_size=cfg.ppo.micro_batch_size,
                                     temperature=temperature)
                adv = compute_advantages(batch, scores, cfg, iteration=it + 1, reduce_fn=D.all_reduce_sum)
                algo_metrics.update(adv.metrics)
                if staleness:  # tokens of an older policy: the decoupled objective's weights
                    weighted, stale_metrics = decoupled_advantages(
                        adv.advantages, scores.old_logprobs, batch.behaviour_logprobs, batch.response_mask,
                        cap=cfg.ppo.behaviour_weight_cap)
                    adv = replace(adv, advantages=weighted)
                    algo_metrics.update(stale_metrics)
            with times.phase("update"):
                upd = update(TrainingRows.of(batch, rows, scores, adv), actor=models.actor, critic=models.critic, spec=self.spec, cfg=cfg.ppo,
                             aggregation=self.spec.loss_aggregation(cfg.algo.loss_aggregation), rng=self.update_rng,
                             skipped=self.skipped, train_actor=not warm, pad_id=batch.pad_id,
                             temperature=temperature)
        else:  # dynamic sampling kept no group on some rank: nothing to learn from
            upd = {"update/skipped_no_signal": 1.0}
        with times.phase("sync"):
            self.prefetch.wait()  # no weight change under a generation in flight
            if not warm:
                self.rollout.sync(models.actor.module, self.collector)
                self.policy_version += 1
            self.rollout.resume()
        self.turns_done += turns
        every = cfg.logging.dump_batch_every
        if every and (it + 1) % every == 0 and D.is_main():
            (self.run_dir / "batches").mkdir(exist_ok=True)
            scored_batch(batch, scores, adv).save(self.run_dir / "batches" / f"iter_{it + 1:06d}.pt")
        metrics = iteration_metrics(
            iteration=it + 1, phase=self.phase_of(it), turns_done=self.turns_done,
            turns_all_ranks=turns, batch=batch, stats=stats, recent_success=self.recent_success,
            old_logprobs=scores.old_logprobs if scores else None, values=scores.values if scores else None,
            returns=adv.returns if adv else None, update=upd, times=times)
        metrics.update(algo_metrics)
        if cfg.gae.gamma_step_schedule:
            metrics["gae/gamma_step"] = cfg.gae.gamma_step_at(it + 1)
        if cfg.ppo.kl_coef_schedule:
            metrics["ppo/kl_coef"] = cfg.ppo.kl_coef
        if cfg.ppo.actor_lr_schedule:
            metrics["ppo/actor_lr"] = cfg.ppo.actor_lr_at(it + 1)
        if cfg.rollout.temperature_schedule:
            metrics["rollout/temperature"] = cfg.rollout.temperature_at(it + 1)
        if cfg.env.revisit_penalty_schedule:
            metrics["env/revisit_penalty"] = cfg.env.revisit_penalty_at(it + 1)
        if cfg.rollout.max_staleness:
            metrics["rollout/staleness"] = float(staleness)
        for message in stats.env_fault_messages:
            self._say(logger, f"iteration {it + 1}: environment fault, env restarted: {message}")
        if cfg.eval.every and (it + 1) % cfg.eval.every == 0 and D.is_main():
            result = self.run_eval(f"iter_{it + 1}", greedy=cfg.eval.greedy, logger=logger, iteration=it + 1)
            metrics["eval/success"] = result.success_mean
        return metrics

    def _sample_at(self, it: int) -> None:
        """Set the collector's sampling temperature, and with ``env.revisit_penalty_schedule`` its training
        envs' revisit cost, to those of iteration ``it`` (0-based), before its batch is collected. The cost
        is set on every env each time (idempotent), so an env rebuilt after a fault and a resumed run's
        envs get it too."""
        sampling = self.collector.sampling
        self.collector.sampling = replace(sampling, temperature=self.cfg.rollout.temperature_at(it + 1))
        if self.cfg.env.revisit_penalty_schedule:  # through the wrappers to each env, in its worker process
            self.collector.venv.call("set_revisit_penalty", self.cfg.env.revisit_penalty_at(it + 1))

    def _collect_ahead(self, it: int) -> bool:
        """Whether iteration ``it`` collects the next batch during its update (``rollout.max_staleness=1``):
        not in the last iteration, nor in one that ends with a scheduled checkpoint (so that it resumes
        exactly; see :mod:`verlog.prefetch`)."""
        cfg = self.cfg
        checkpoint = bool(cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0)
        return bool(cfg.rollout.max_staleness) and it + 1 < cfg.iterations and not checkpoint

    def phase_of(self, it: int) -> str:
        """Iteration ``it``'s phase (0-based): ``critic_warmup`` (value-only) or the algorithm's name."""
        warm = self.critic is not None and it < self.cfg.ppo.critic_warmup_iterations
        return "critic_warmup" if warm else self.cfg.algo.algorithm

    # ------------------------------------------------------------------ evaluation
    def run_eval(self, label: str, *, greedy: bool, logger: MetricLogger | None = None,
                 phase: str = "eval", iteration: int = 0) -> EvalResult:
        """Evaluate the rollout engine's current policy, trained through ``iteration`` (0: untrained), on
        ``eval.episodes`` fixed seeds (the episodes counted on the progress bar under ``phase`` when a logger
        is given); sampled decoding is at the temperature the policy was last trained at."""
        mode = "greedy" if greedy else "sampled"
        rollout = self.cfg.rollout
        cfg = replace(self.cfg, rollout=replace(rollout, temperature=rollout.temperature_at(max(iteration, 1))))
        with logger.evaluation(phase, cfg.eval.episodes, mode) if logger is not None else nullcontext() as tick:
            result = evaluate_policy(cfg, self.engine, self.tokenizer, self.collector, greedy=greedy,
                                     on_episode=tick)
        self.eval_results.setdefault(label, {})[mode] = result.summary()
        return result

    def _evaluate(self, label: str, logger: MetricLogger | None, phase: str, iteration: int) -> None:
        for greedy in (True, False):
            r = self.run_eval(label, greedy=greedy, logger=logger, phase=phase, iteration=iteration)
            tasks = "".join(f"; {name} {t['success_mean']:.2f} ± {t['success_se']:.2f} ({t['episodes']})"
                            for name, t in r.per_task.items())
            self._say(logger, f"{label} policy ({'greedy' if greedy else 'sampled'}): success "
                              f"{r.success_mean:.3f} ± {r.success_se:.3f} over {r.episodes} episodes{tasks}")

    # ------------------------------------------------------------------ checkpoints and exact resume
    def save_checkpoint(self, iteration: int) -> Path:
        """Write ``checkpoints/iter_<k>/`` atomically (:func:`~verlog.checkpointing.save_checkpoint`)."""
        # a batch collected ahead and not trained yet is collected again after a resume
        before = self.prefetch.resume_states()
        generators = self._generators()
        if before is not None:
            generators["rollout"] = torch.Generator().set_state(before[1])
        rank_state = {"collector": before[0] if before is not None else self.collector.state_dict(),
                      **self.recent_success.state_dict(),
                      "turns_done": self.turns_done, "skipped_steps": dict(self.skipped.counts)}
        trainer_state = {"iteration": iteration, "world_size": self.world, "eval_results": self.eval_results,
                         "config": to_dict(self.cfg)}
        return save_checkpoint(self.run_dir, iteration, engines=self.models.engines(), tokenizer=self.tokenizer,
                               rank_state=rank_state, generators=generators, trainer_state=trainer_state,
                               keep=self.cfg.checkpoint_keep)

    def _generators(self) -> dict[str, torch.Generator]:
        return dict(zip(GENERATOR_NAMES, (self.update_rng, self.engine.generator), strict=True))

    def _load_rank_state(self, ckpt: Path) -> None:
        """Restore this rank's collector (replaying in-flight episodes), counters and RNG states."""
        state = read_rank_state(ckpt, self.rank)
        self.collector.load_state_dict(state["collector"])
        self.recent_success.load_state_dict(state)
        self.turns_done = int(state["turns_done"])
        self.skipped = SkippedSteps(self.cfg.deepspeed.zero_stage,
                                             {k: int(v) for k, v in state["skipped_steps"].items()})
        load_rng_states(ckpt, self.rank, self._generators())  # nothing may draw after this
        if D.is_main():  # only now, with every state restored, are the later metric rows dropped
            truncate_metrics(self.run_dir / "metrics.jsonl", self.start_iteration)

    def resume_command(self) -> str:
        """The command line that continues this run from its newest checkpoint."""
        return f"verlog-train {self.run_dir / 'config.yaml'} resume={self.run_dir}"

    @staticmethod
    def _say(logger: MetricLogger | None, message: str) -> None:
        if logger is not None:
            logger.write(message)
        else:
            print(message, flush=True)
