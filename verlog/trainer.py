"""The PPO iteration loop: collect T x N turns, score, dual-discount GAE, update, sync, log.

One iteration (DESIGN.md "One PPO iteration, as data"):

1. the fixed-turn collector gathers a :class:`~verlog.batch.TurnBatch` with the rollout engine
   (critic-free algorithms: grouped whole episodes; ``agent.loop`` tools/proxy: whole tool
   conversations, :mod:`verlog.rollout.conversations`);
2. scoring: old logprobs (actor), reference logprobs (only when ``ppo.kl_coef > 0``), values V_k
   and the bootstrap values (critic);
3. token rewards (environment reward on the last response token, optional KL penalty) and
   :func:`~verlog.algos.gae.dual_discount_gae`, advantages whitened over the global batch;
4. ``ppo.epochs`` x ``ppo.minibatches`` optimizer steps on the actor and critic DeepSpeed engines
   (the actor is frozen during the first ``ppo.critic_warmup_iterations`` iterations);
5. the actor's weights are loaded into the rollout engine; metrics and checkpoints are written.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections import deque
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verlog import distributed as D
from verlog.algos.critic_free import critic_free_advantages, dynamic_sampling_keep
from verlog.algos.gae import padded_dual_discount_gae
from verlog.algos.losses import gspo_policy_loss, kl_penalty, overlong_penalty, ppo_policy_loss, value_loss
from verlog.algos.rewards import token_rewards
from verlog.algos.stats import explained_variance, masked_whiten
from verlog.batch import TurnBatch
from verlog.config import ConfigError, TrainConfig, save_config, to_dict
from verlog.envs.registry import make_env
from verlog.envs.vector import make_vector_env
from verlog.builders import (agent_warmup_examples, build_tiny_for, decoder, evaluate_agent, evaluate_config,
                             make_agent_collector, memory_factory, sampling_params, task_label, tiny_model_dir,
                             uses_agent)
from verlog.evaluate import EvalResult
from verlog.logging import MetricLogger
from verlog.lora import add_lora, merged_named_parameters
from verlog.microbatch import MicroBatches, by_row_count, by_token_budget
from verlog.resume import StopSignals, load_rng_states, save_rng_states, truncate_metrics
from verlog.models import load_actor, load_critic, load_tokenizer
from verlog.rollout.collector import FixedTurnCollector
from verlog.rollout.conversations import ProxyCollector, ToolLoopCollector
from verlog.rollout.episodes import EpisodeCollector
from verlog.rollout.records import CollectStats
from verlog.scoring import Rows, batched, critic_outputs, pack_prompts, pack_rows, policy_outputs
from verlog.warmup import collect_prompts, format_warmup

CHECKPOINT_MARKER = "COMPLETE"


class NumericalFault(RuntimeError):
    """Too many optimizer steps in a row were skipped for non-finite values (a checkpoint was written)."""


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run (a half-written one has no marker)."""
    ckpts = sorted((run_dir / "checkpoints").glob("iter_*"))
    # iter_<k>.tmp is a checkpoint being written (a kill may even leave one with its marker).
    complete = [c for c in ckpts if (c / CHECKPOINT_MARKER).is_file() and not c.name.endswith(".tmp")]
    return complete[-1] if complete else None


class Trainer:
    """Turn-level PPO with a critic; see the module docstring for one iteration.

    Args:
        cfg: a validated :class:`~verlog.config.TrainConfig`.
    """

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        try:
            D.require_gpus(cfg.gpus_per_node, f"recipe {cfg.name}")
        except RuntimeError as err:
            raise ConfigError(f"gpus_per_node: {err}") from None
        self.critic_free = cfg.algo.algorithm != "ppo"
        self.agent = uses_agent(cfg)  # conversations of a tool task instead of text environments
        if cfg.algo.algorithm == "gigpo" and not self.agent:
            _check_state_keys(cfg)
        if cfg.model.path != "tiny":
            load_tokenizer(cfg.model.path)  # fail fast, with one line, before any process group exists
        D.init_distributed()
        torch.set_num_threads(cfg.threads)
        self.rank, self.world = D.rank(), D.world_size()
        seed_everything(cfg.seed + 1000 * self.rank)
        self.run_dir = Path(cfg.resume) if cfg.resume else Path(cfg.run_root) / cfg.name
        self.start_iteration = 0
        resume_from = newest_checkpoint(self.run_dir) if cfg.resume else None
        if cfg.resume and resume_from is None:
            raise FileNotFoundError(f"resume: no complete checkpoint under {self.run_dir}/checkpoints")
        if D.is_main():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.run_dir / "config.yaml")
        self.eval_results: dict[str, dict[str, Any]] = {}
        self._phase_times: dict[str, float] = {}

        base_path = self._base_model_path()
        self.tokenizer = load_tokenizer(base_path)
        self.make_memory = memory_factory(cfg.memory, self.tokenizer)
        self.decode = decoder(self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.eos_id = int(self.tokenizer.eos_token_id)

        # The initial policy: the KL reference, and where a fresh run's actor and critic start.
        initial_path = self.run_dir / "format_warmup" if cfg.format_warmup.steps > 0 else base_path
        if resume_from is not None:
            actor_path, critic_path = resume_from / "actor", resume_from / "critic"
            state = json.loads((resume_from / "trainer_state.json").read_text())
            self.start_iteration = int(state["iteration"])
            self.eval_results = state.get("eval_results", {})
        else:
            if cfg.format_warmup.steps > 0:
                self._format_warmup(base_path, initial_path)
            actor_path = initial_path
            critic_path = cfg.model.critic_path or actor_path
        dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
        self.lora = cfg.model.lora_rank > 0
        if self.lora:  # adapters on the initial weights; a resume restores them from the DeepSpeed checkpoint
            actor_path, critic_path = initial_path, cfg.model.critic_path or initial_path

        n_micro = math.ceil(self.turns_per_batch // cfg.ppo.minibatches / cfg.ppo.micro_batch_size)
        ds = dict(zero_stage=cfg.deepspeed.zero_stage, micro_batch_size=cfg.ppo.micro_batch_size,
                  grad_accum_steps=n_micro, max_grad_norm=cfg.ppo.max_grad_norm, bf16=cfg.deepspeed.bf16)
        actor = self._with_lora(load_actor(actor_path, dtype=dtype), actor_path, critic=False)
        if cfg.ppo.gradient_checkpointing:
            actor.gradient_checkpointing_enable()
        self.actor = D.make_engine(actor, lr=cfg.ppo.actor_lr, weight_decay=cfg.ppo.weight_decay,
                                   config=D.ds_config(**ds))
        self.critic = None  # the critic-free algorithms train no critic
        if not self.critic_free:
            critic = load_critic(critic_path, dtype=dtype, value_head_init_std=cfg.model.value_head_init_std)
            critic = self._with_lora(critic, critic_path, critic=True)
            if cfg.ppo.gradient_checkpointing:
                critic.gradient_checkpointing_enable()
            self.critic = D.make_engine(critic, lr=cfg.ppo.critic_lr, weight_decay=cfg.ppo.weight_decay,
                                        config=D.ds_config(**ds))
        if resume_from is not None:
            for name, engine in self._engines().items():
                engine.load_checkpoint(str(resume_from / "ds"), tag=name)
        self.ref = None  # with LoRA the reference is the actor with its adapter disabled
        if cfg.ppo.kl_coef > 0 and not self.lora:
            self.ref = load_actor(initial_path, dtype=dtype).to(D.device()).eval().requires_grad_(False)

        self.engine = self._make_rollout_engine(actor_path)
        if self.lora and resume_from is not None:
            self.sync_weights()  # the engine started from the base weights
        self.sampling = sampling_params(cfg.rollout)
        # A resumed run re-creates the interrupted run's in-flight episodes (load_resume_state).
        env_seed = cfg.seed * 100_003 + self.rank * 1009
        self.venv = None
        self.collector: FixedTurnCollector | EpisodeCollector | ToolLoopCollector | ProxyCollector
        if self.agent:  # whole conversations; groups of the same item for the critic-free algorithms
            self.collector = make_agent_collector(cfg, self.engine, self.tokenizer, pad_id=self.pad_id, seed=env_seed,
                                                  group_size=cfg.algo.group_size if self.critic_free else 1)
        else:
            self._make_env_collector(env_seed)
        self._recent_success: deque[float] = deque(maxlen=100)
        self._turns_done = self.start_iteration * self.turns_per_batch * self.world
        self._update_rng = torch.Generator().manual_seed(cfg.seed + 7 * self.rank)
        # optimizer steps skipped for non-finite values: in total, and in a row per engine
        self.skipped_steps = {"total": 0, "actor": 0, "critic": 0}
        self.stop_signals = StopSignals()  # SIGINT/SIGTERM during train(): stop after the iteration
        if resume_from is not None:
            self._load_resume_state(resume_from)

    def _make_env_collector(self, env_seed: int) -> None:
        """The text environments and their collector: fixed-turn (PPO) or grouped whole episodes."""
        cfg = self.cfg
        state_keys = cfg.algo.algorithm == "gigpo"
        self.venv = make_vector_env(cfg.env.task, cfg.env.num_envs, seed=env_seed, mode=cfg.env.vector_mode,
                                    env_kwargs=self.env_kwargs, step_timeout_s=cfg.env.step_timeout_s,
                                    restart_attempts=cfg.env.restart_attempts, state_keys=state_keys)
        memories = [self.make_memory() for _ in range(cfg.env.num_envs)]
        if self.critic_free:  # whole episodes in groups sharing a start state
            self.collector = EpisodeCollector(self.venv, memories, self.engine, self.decode, self.sampling,
                                              self.pad_id, seed=env_seed, group_size=cfg.algo.group_size,
                                              state_keys=state_keys)
        else:
            self.collector = FixedTurnCollector(self.venv, memories, self.engine, self.decode, self.sampling,
                                                cfg.rollout.turns_per_env, self.pad_id, seed=env_seed)

    def _with_lora(self, model: torch.nn.Module, base_path: str | Path, *, critic: bool) -> torch.nn.Module:
        """``model`` with LoRA adapters when ``model.lora_rank`` > 0 (:func:`verlog.lora.add_lora`), else itself."""
        m = self.cfg.model
        if not self.lora:
            return model
        return add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha, dropout=m.lora_dropout,
                        target_modules=m.lora_target_modules, base_path=base_path, critic=critic,
                        modules_to_save=m.lora_modules_to_save)

    def _engines(self) -> dict[str, Any]:
        """The DeepSpeed engines by checkpoint tag: the actor, and the critic where there is one."""
        return {"actor": self.actor, **({"critic": self.critic} if self.critic is not None else {})}

    # ------------------------------------------------------------------ exact resume
    def _rank_state(self) -> dict[str, Any]:
        return {"collector": self.collector.state_dict(), "recent_success": list(self._recent_success),
                "turns_done": self._turns_done, "skipped_steps": dict(self.skipped_steps)}

    def _generators(self) -> dict[str, torch.Generator]:
        return {"update": self._update_rng, "rollout": self.engine.generator}

    def _load_resume_state(self, ckpt: Path) -> None:
        """Restore this rank's collector (replaying in-flight episodes), counters and RNG states.

        Raises:
            FileNotFoundError: the checkpoint holds no state for this rank.
        """
        path = ckpt / f"state_rank{self.rank}.json"
        if not path.is_file():
            raise FileNotFoundError(f"resume: {path} is missing (a checkpoint of another world size "
                                    "or of a Verlog without exact resume)")
        state = json.loads(path.read_text())
        self.collector.load_state_dict(state["collector"])
        self._recent_success.extend(float(x) for x in state["recent_success"])
        self._turns_done = int(state["turns_done"])
        self.skipped_steps = {k: int(v) for k, v in state["skipped_steps"].items()}
        if D.is_main():
            truncate_metrics(self.run_dir / "metrics.jsonl", self.start_iteration)
        load_rng_states(ckpt, self.rank, self._generators())  # last: nothing may draw after this

    # ------------------------------------------------------------------ set-up helpers
    @property
    def turns_per_batch(self) -> int:
        """T x N turns collected by this rank per iteration."""
        return self.cfg.rollout.turns_per_env * self.cfg.env.num_envs

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return self.cfg.env.env_kwargs()


    def _base_model_path(self) -> str | Path:
        cfg = self.cfg
        if cfg.model.path != "tiny":
            return cfg.model.path
        if D.is_main():
            build_tiny_for(cfg)
        self._barrier()
        return tiny_model_dir(cfg)

    def _format_warmup(self, base_path: str | Path, out: Path) -> None:
        """Teach the reply format to the base model and save the result to ``out`` (rank 0)."""
        cfg, fw = self.cfg, self.cfg.format_warmup
        if D.is_main():
            tic = time.perf_counter()
            model = load_actor(base_path)
            if self.agent:
                examples = agent_warmup_examples(cfg, self.tokenizer, items=fw.episodes, seed=cfg.seed + 77)
            else:
                examples = collect_prompts(cfg.env.task, self.make_memory, episodes=fw.episodes, seed=cfg.seed + 77,
                                           env_kwargs=self.env_kwargs)
            losses = format_warmup(model, lambda s: self.tokenizer.encode(s, add_special_tokens=False),
                                   self.eos_id, self.pad_id, examples, steps=fw.steps, batch_size=fw.batch_size,
                                   lr=fw.lr, seed=cfg.seed)
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
            self._phase_times["format_warmup_seconds"] = time.perf_counter() - tic
            print(f"format warm-up: {fw.steps} steps on {len(examples)} prompts, target NLL "
                  f"{losses[0]:.3f} -> {losses[-1]:.3f} nats/token ({self._phase_times['format_warmup_seconds']:.1f} s)",
                  flush=True)
        self._barrier()

    def _make_rollout_engine(self, path: str | Path) -> Any:
        if self.cfg.rollout.engine == "vllm":
            from verlog.rollout.vllm import VLLMEngine

            r = self.cfg.rollout
            return VLLMEngine(str(path), dtype=self.cfg.model.dtype,
                              max_model_len=self.cfg.memory.max_prompt_tokens + r.max_response_tokens,
                              seed=self.cfg.seed + self.rank, gpu_memory_utilization=r.vllm_gpu_memory_utilization,
                              tensor_parallel_size=r.vllm_tensor_parallel_size, cpu_kv_cache_gb=r.vllm_cpu_kv_cache_gb,
                              sleep_mode=r.vllm_sleep_between_updates)
        from verlog.rollout.hf import HFEngine

        dtype = torch.bfloat16 if self.cfg.model.dtype == "bfloat16" else torch.float32
        return HFEngine(path, self.tokenizer, dtype=dtype, device=str(D.device()), seed=self.cfg.seed + self.rank)

    def _barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    # ------------------------------------------------------------------ one iteration
    def score(self, batch: TurnBatch) -> Rows:
        """Fill old logprobs, reference logprobs, values and bootstrap values; return the turn rows.

        Only real turns are scored (whole-episode batches have padding turns); the rows are those
        turns in :meth:`positions` order and the [T, N, R] fields are zero on padding turns.
        """
        T, N = batch.num_turns, batch.num_envs
        mb = self.cfg.ppo.micro_batch_size
        pos = self.positions(batch)
        flat = lambda x: x.flatten(0, 1)[pos]  # noqa: E731
        rows = pack_rows(flat(batch.prompt_ids), flat(batch.prompt_lengths), flat(batch.response_ids),
                         flat(batch.response_mask), self.pad_id)
        self.actor.eval()
        shape = batch.response_mask.shape

        def scatter(values: torch.Tensor) -> torch.Tensor:
            out = torch.zeros(T * N, shape[2], dtype=values.dtype)
            out[pos] = values
            return out.view(shape)

        batch.old_logprobs = scatter(batched(lambda r: policy_outputs(self.actor, r)[0], rows, mb))
        if self.ref is not None:
            batch.ref_logprobs = scatter(batched(lambda r: policy_outputs(self.ref, r)[0], rows, mb))
        elif self.lora and self.cfg.ppo.kl_coef > 0:
            with self.actor.module.disable_adapter():  # the base weights are the reference policy
                batch.ref_logprobs = scatter(batched(lambda r: policy_outputs(self.actor, r)[0], rows, mb))
        if self.critic is None:
            return rows
        self.critic.eval()
        batch.values = scatter(batched(lambda r: critic_outputs(self.critic, r), rows, mb))
        batch.bootstrap_values = torch.zeros(T, N)
        if batch.bootstrap_prompts:
            keys = sorted(batch.bootstrap_prompts)
            prompt_rows = pack_prompts([batch.bootstrap_prompts[k] for k in keys], self.pad_id)
            values = batched(lambda r: critic_outputs(self.critic, r)[:, 0:1], prompt_rows, mb).squeeze(1)
            for (t, n), v in zip(keys, values.tolist()):
                batch.bootstrap_values[t, n] = v
        return rows

    @staticmethod
    def positions(batch: TurnBatch) -> torch.Tensor:
        """long [M]: flat positions t * N + n of the batch's real turns (the training rows)."""
        return batch.turns.flatten().nonzero().squeeze(1)

    def compute_advantages(self, batch: TurnBatch) -> dict[str, float]:
        """Token advantages of ``algo.algorithm``; returns the estimator's metrics.

        PPO: token rewards, dual-discount GAE, advantages whitened over all ranks' valid tokens.
        Critic-free: :func:`~verlog.algos.critic_free.critic_free_advantages` on the whole
        episodes (normalised by their groups; no returns, no whitening).
        """
        cfg = self.cfg
        mask = batch.response_mask
        if self.critic is None:
            batch.advantages, metrics = critic_free_advantages(batch, cfg.algo)
            return metrics
        kl = None
        if cfg.ppo.kl_coef > 0 and cfg.ppo.kl_in_reward:
            kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, cfg.ppo.kl_kind)
        batch.token_rewards = token_rewards(batch.rewards, mask, kl, cfg.ppo.kl_coef, turn_mask=batch.turns)
        g = cfg.gae
        # whole-episode batches (tool conversations) end shorter episodes with padding turns
        adv, ret = padded_dual_discount_gae(batch.token_rewards, batch.values, mask, batch.terminated,
                                            batch.truncated, batch.bootstrap_values, batch.turns, g.gamma_step,
                                            g.lam_step, g.gamma_token, g.lam_token)
        batch.returns = ret
        batch.advantages = masked_whiten(adv, mask, reduce_fn=D.all_reduce_sum) if g.whiten_advantages else adv
        return {}

    def _policy_loss(self, logp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                     normalizer: float) -> tuple[torch.Tensor, dict[str, float]]:
        """The configured policy loss of one micro-batch: PPO's clipped surrogate or GSPO's."""
        cfg, algo = self.cfg.ppo, self.cfg.algo
        if algo.algorithm == "gspo":
            return gspo_policy_loss(logp, old_lp, adv, mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                    loss_normalizer=normalizer, aggregation=self.aggregation)
        return ppo_policy_loss(logp, old_lp, adv, mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                               dual_clip=cfg.dual_clip, loss_normalizer=normalizer, aggregation=self.aggregation)

    @property
    def aggregation(self) -> str:
        """The policy loss's aggregation (GSPO always averages sequences: seq-mean-token-mean)."""
        return "seq-mean-token-mean" if self.cfg.algo.algorithm == "gspo" else self.cfg.algo.loss_aggregation

    def _micro_batches(self, idx: torch.Tensor, lengths: torch.Tensor) -> MicroBatches:
        """Split a minibatch's row indices into micro-batches, as many on every rank.

        By ``ppo.micro_batch_tokens`` (length-sorted, :func:`~verlog.microbatch.by_token_budget`)
        or by ``ppo.micro_batch_size`` rows. With ZeRO-2 the engines communicate on every backward,
        so all ranks must run the same number of micro-batches; a rank with fewer runs empty ones
        (zero loss).
        """
        cfg = self.cfg.ppo
        if cfg.micro_batch_tokens:
            mbs = by_token_budget(idx, lengths, cfg.micro_batch_tokens)
        else:
            mbs = by_row_count(idx, lengths, cfg.micro_batch_size)
        count = int(D.all_reduce_max(torch.tensor([float(len(mbs.batches))], device=D.device())).item())
        mbs.batches += [idx[:0]] * (count - len(mbs.batches))
        return mbs

    def collect(self) -> tuple[TurnBatch, CollectStats, dict[str, float]]:
        """One iteration's turns: a fixed-turn batch (PPO) or a round of grouped whole episodes.

        The DAPO overlong penalty (``algo.overlong_penalty``) is added to each turn's reward. With
        ``algo.dynamic_sampling`` (always on for ``dapo``) the groups whose episode returns are all equal are dropped
        (their turns become padding) and further rounds are collected, at most
        ``algo.max_refills``, until as many groups as one round holds have a learning signal.

        Returns:
            (batch, stats of every round collected, metrics ``algo/dropped_groups``, ``algo/refills``).
        """
        algo = self.cfg.algo
        batch, stats = self.collector.collect()
        self._shape_rewards(batch)
        if not (algo.dynamic_sampling or algo.algorithm == "dapo"):
            return batch, stats, {}
        target = self.cfg.env.num_envs // algo.group_size
        parts, kept_total, dropped_total, refills = [], 0, 0, 0
        while True:
            keep, kept, dropped = dynamic_sampling_keep(batch)
            batch.turn_mask = keep
            parts.append(batch)
            kept_total, dropped_total = kept_total + kept, dropped_total + dropped
            if kept_total >= target or refills >= algo.max_refills:
                break
            refills += 1
            batch, more = self.collector.collect()
            self._shape_rewards(batch)
            _merge_stats(stats, more)
        merged = TurnBatch.concat_envs(parts) if len(parts) > 1 else parts[0]
        return merged, stats, {"algo/kept_groups": float(kept_total), "algo/dropped_groups": float(dropped_total),
                               "algo/refills": float(refills)}

    def _shape_rewards(self, batch: TurnBatch) -> None:
        """Add DAPO's overlong penalty (by response length) to the rewards of real turns, if on."""
        algo = self.cfg.algo
        if algo.overlong_penalty:
            penalty = overlong_penalty(batch.response_lengths, self.cfg.rollout.max_response_tokens,
                                       algo.overlong_cache_tokens, algo.overlong_penalty_factor)
            batch.rewards = batch.rewards + torch.where(batch.turns, penalty, 0.0)

    def _zero_loss(self, engine: Any) -> torch.Tensor:
        """A zero loss through every parameter (one pad token), for an empty micro-batch."""
        ids = torch.full((1, 1), self.pad_id, dtype=torch.long, device=D.device())
        return engine(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum() * 0.0

    def _backward(self, engine: Any, loss: torch.Tensor, boundary: bool) -> None:
        """One micro-batch backward; the optimizer step applies at the minibatch's last one."""
        engine.set_gradient_accumulation_boundary(boundary)
        engine.backward(loss, scale_wrt_gas=False)
        engine.step()

    def update(self, batch: TurnBatch, rows: Rows, *, train_actor: bool) -> dict[str, float]:
        """Epochs over minibatches of the turn rows; returns token-weighted averages of the metrics.

        Each epoch splits the M rows (a random permutation) into ``ppo.minibatches`` minibatches,
        one optimizer step each for the actor (unless frozen) and, with PPO, the critic. The loss
        of a minibatch is normalised by its valid tokens (token-mean) or sequences (seq-mean
        aggregations, :func:`~verlog.algos.losses.aggregate_loss`).
        """
        cfg = self.cfg.ppo
        M = len(rows)
        pos = self.positions(batch)
        flat = lambda x: x.flatten(0, 1)[pos]  # noqa: E731
        mask, old_lp, adv = flat(batch.response_mask), flat(batch.old_logprobs), flat(batch.advantages)
        ref_lp = flat(batch.ref_logprobs) if batch.ref_logprobs is not None else None
        critic_on = self.critic is not None
        if critic_on:
            old_v, ret = flat(batch.values), flat(batch.returns)
        kl_loss_on = cfg.kl_coef > 0 and not cfg.kl_in_reward
        seq_norm = self.aggregation != "token-mean"
        row_lengths = rows.attention_mask.sum(-1)
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}

        def add(key: str, value: float, weight: float) -> None:
            sums[key] = sums.get(key, 0.0) + value * weight
            weights[key] = weights.get(key, 0.0) + weight

        self.actor.train()
        if critic_on:
            self.critic.train()
        actor_stopped = not train_actor
        skipped_here = 0
        for _epoch in range(cfg.epochs):
            perm = torch.randperm(M, generator=self._update_rng)
            for idx in perm.tensor_split(cfg.minibatches):
                n_tok = max(float(mask[idx].sum()), 1.0)
                norm = max(float(mask[idx].any(-1).sum()), 1.0) if seq_norm else n_tok  # what the loss averages over
                mbs = self._micro_batches(idx, row_lengths)
                micro = mbs.batches
                add("update/padding_fraction", mbs.padding_fraction, float(mbs.padded_tokens))
                if not actor_stopped:
                    kl_sum = 0.0
                    finite = True
                    for i, mi in enumerate(micro):
                        boundary = i == len(micro) - 1
                        if mi.numel() == 0:
                            self._backward(self.actor, self._zero_loss(self.actor), boundary)
                            continue
                        r = rows.select(mi)
                        m = mask[mi]
                        logp, ent = policy_outputs(self.actor, r, with_entropy=True)
                        pg, stats = self._policy_loss(logp, old_lp[mi], adv[mi], m, norm)
                        ent_sum = (ent * m).sum()
                        loss = pg - cfg.entropy_coef * ent_sum / n_tok
                        w = float(m.sum())
                        if kl_loss_on:
                            kl_ref = (kl_penalty(logp, ref_lp[mi], cfg.kl_kind) * m).sum()
                            loss = loss + cfg.kl_coef * kl_ref / n_tok
                            add("actor/kl_ref", kl_ref.item() / max(w, 1.0), w)
                        # A non-finite loss is still back-propagated: its non-finite gradients make
                        # DeepSpeed skip the whole minibatch's optimizer step (see _after_step).
                        finite = finite and bool(torch.isfinite(loss))
                        self._backward(self.actor, loss, boundary)
                        if not bool(torch.isfinite(loss)):
                            continue  # counted in update/skipped_steps, not averaged into the losses
                        unit = float(m.any(-1).sum()) if seq_norm else w  # what the loss averages over
                        add("actor/pg_loss", pg.item() * norm / max(unit, 1.0), unit)
                        add("actor/entropy", ent_sum.item() / max(w, 1.0), w)
                        for key in ("clip_fraction", "approx_kl", "ratio_mean", "seq_ratio_mean"):
                            if key in stats:
                                add(f"actor/{key}", float(stats[key]), w)
                        kl_sum += float(stats.get("approx_kl", 0.0)) * w
                    if self._after_step(self.actor, "actor", finite):
                        add("actor/grad_norm", _grad_norm(self.actor), 1.0)
                    else:
                        skipped_here += 1
                    if cfg.target_kl is not None and kl_sum / n_tok > cfg.target_kl:
                        actor_stopped = True
                        sums["actor/early_stopped"], weights["actor/early_stopped"] = 1.0, 1.0
                if not critic_on:
                    continue
                finite = True
                for i, mi in enumerate(micro):
                    boundary = i == len(micro) - 1
                    if mi.numel() == 0:
                        self._backward(self.critic, self._zero_loss(self.critic), boundary)
                        continue
                    r = rows.select(mi)
                    m = mask[mi]
                    values = critic_outputs(self.critic, r)
                    vl, vstats = value_loss(values, old_v[mi], ret[mi], m, clip_range=cfg.value_clip,
                                            loss_normalizer=n_tok)
                    finite = finite and bool(torch.isfinite(vl))
                    self._backward(self.critic, cfg.value_coef * vl, boundary)
                    if not bool(torch.isfinite(vl)):
                        continue
                    w = float(m.sum())
                    add("critic/value_loss", vl.item() * n_tok / max(w, 1.0), w)
                    add("critic/value_clip_fraction", float(vstats["value_clip_fraction"]), w)
                if self._after_step(self.critic, "critic", finite):
                    add("critic/grad_norm", _grad_norm(self.critic), 1.0)
                else:
                    skipped_here += 1
        self.actor.eval()
        if critic_on:
            self.critic.eval()
        out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        out.setdefault("actor/early_stopped", 0.0)
        out["update/skipped_steps"] = float(skipped_here)
        out["update/skipped_steps_total"] = float(self.skipped_steps["total"])
        out["update/skipped_steps_consecutive"] = float(self._consecutive_skips())
        return out

    def _after_step(self, engine: Any, name: str, losses_finite: bool) -> bool:
        """Account for one optimizer step (a minibatch boundary); True when it was applied.

        DeepSpeed's ZeRO optimizer skips a step whose gradient norm is not finite (and zeroes the
        gradients), so a non-finite loss or gradient norm leaves the weights and optimizer state
        untouched; such a step is counted in ``self.skipped_steps``.

        Raises:
            RuntimeError: the engine applied a step despite a non-finite loss or gradient norm
                (an optimizer without DeepSpeed's overflow check, e.g. ``deepspeed.zero_stage=0``).
        """
        applied = bool(engine.was_step_applied())
        norm = engine.get_global_grad_norm()  # None where the optimizer does not report it (ZeRO-0)
        norm_finite = norm is None or math.isfinite(float(norm))
        if applied and not (losses_finite and norm_finite):
            raise RuntimeError(f"{name}: DeepSpeed applied an optimizer step with a non-finite loss or gradient "
                               f"norm (zero_stage={self.cfg.deepspeed.zero_stage} does not skip it); use "
                               "deepspeed.zero_stage 1-3")
        if applied:
            self.skipped_steps[name] = 0
        else:
            self.skipped_steps["total"] += 1
            self.skipped_steps[name] += 1
            print(f"{name}: optimizer step skipped (non-finite loss or gradient norm); "
                  f"{self.skipped_steps[name]} in a row, {self.skipped_steps['total']} in total", flush=True)
        return applied

    def _consecutive_skips(self) -> int:
        """The longest current run of skipped steps of one engine (actor or critic)."""
        return max(self.skipped_steps["actor"], self.skipped_steps["critic"])

    def sync_weights(self) -> None:
        """Load the actor's current weights into the rollout engine."""
        named = merged_named_parameters(self.actor.module) if self.lora else D.gathered_named_parameters(self.actor.module)
        if isinstance(getattr(self, "collector", None), ProxyCollector):  # requests wait while the weights change
            with self.collector.weights_changing():
                self.engine.load_weights(named)
        else:
            self.engine.load_weights(named)

    # ------------------------------------------------------------------ metrics, eval, checkpoints
    def _metrics(self, it: int, batch: TurnBatch, stats: CollectStats, upd: dict[str, float],
                 times: dict[str, float], warm: bool, turns_all_ranks: int) -> dict[str, Any]:
        mask = batch.response_mask
        real = batch.turns
        eps = stats.episodes
        for e in eps:
            self._recent_success.append(float(e.success))
        valid_lp = mask & torch.isfinite(batch.behaviour_logprobs)
        old_lp = batch.old_logprobs if batch.old_logprobs is not None else batch.behaviour_logprobs  # not scored
        lp_diff = (batch.behaviour_logprobs - old_lp).abs()[valid_lp]
        out: dict[str, Any] = {
            "iteration": it + 1,
            "phase": "critic_warmup" if warm else self.cfg.algo.algorithm,
            "turns": self._turns_done,
            "episodes": len(eps),
            "episode/return": _mean([e.episode_return for e in eps]),
            "episode/length": _mean([e.length for e in eps]),
            "episode/success": _mean([float(e.success) for e in eps]),
            "episode/progression": _mean([e.progression for e in eps]),
            "episode/success_recent100": _mean(list(self._recent_success)),
            "episode/truncated_fraction": _mean([float(e.truncated) for e in eps]),
            "rollout/invalid_action_rate": stats.invalid_actions / max(stats.turns, 1),
            "rollout/turns": stats.turns,
            "rollout/cut_at_max_tokens_rate": float(batch.cut_at_max_tokens[real].float().mean()),
            "rollout/response_tokens_mean": float(batch.response_lengths[real].float().mean()),
            "rollout/reward_mean": float(batch.rewards[real].mean()),
            "rollout/behaviour_vs_old_logprob_max_abs": float(lp_diff.max()) if lp_diff.numel() else 0.0,
            "prompt/tokens_mean": _mean(stats.prompt_tokens),
            "prompt/tokens_max": max(stats.prompt_tokens) if stats.prompt_tokens else 0,
            "prompt/trimmed_turns": stats.trimmed_turns,
            "prompt/trimmed_observation_tokens": stats.trimmed_observation_tokens,
            "env/faults": stats.env_faults,
            "env/restarts": stats.env_restarts,
            **upd,
            **{f"time/{k}": v for k, v in times.items()},
        }
        if batch.values is not None:
            out.update({
                "critic/explained_variance": explained_variance(batch.values, batch.returns, mask),
                "critic/values_mean": float(batch.values[mask].mean()),
                "critic/returns_mean": float(batch.returns[mask].mean()),
                "critic/turn_value_mean": float(batch.values[..., 0][real].mean()),
            })
        out["turns_per_second"] = turns_all_ranks / max(sum(times.values()), 1e-9)
        return out

    def run_eval(self, label: str, *, greedy: bool) -> EvalResult:
        """Evaluate the rollout engine's current policy on ``eval.episodes`` fixed seeds."""
        if self.agent:
            result = evaluate_agent(self.cfg, self.collector, greedy=greedy)
        else:
            result = evaluate_config(self.cfg, self.engine, self.tokenizer, greedy=greedy)
        self.eval_results.setdefault(label, {})["greedy" if greedy else "sampled"] = result.summary()
        return result

    def _write_eval_json(self) -> None:
        trained = self.eval_results.get("trained", {}).get("greedy")
        payload: dict[str, Any] = {"task": task_label(self.cfg)}
        if trained:
            payload.update({k: trained[k] for k in ("success_mean", "success_se", "episodes")})
        payload.update(self.eval_results)
        (self.run_dir / "eval.json").write_text(json.dumps(payload, indent=2))

    def _checkpoint_dir(self, iteration: int) -> Path:
        return self.run_dir / "checkpoints" / f"iter_{iteration:06d}"

    def save_checkpoint(self, iteration: int) -> Path:
        """Write ``checkpoints/iter_<k>/`` atomically (aside, then rename; marker written last)."""
        final = self._checkpoint_dir(iteration)
        tmp = final.with_name(final.name + ".tmp")
        if D.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self._barrier()
        (tmp / f"state_rank{self.rank}.json").write_text(json.dumps(self._rank_state()))
        save_rng_states(tmp, self.rank, self._generators())
        for name, engine in self._engines().items():
            engine.save_checkpoint(str(tmp / "ds"), tag=name)
        for name, engine in self._engines().items():
            state_dict = dict(D.gathered_named_parameters(engine.module))
            if D.is_main():
                engine.module.save_pretrained(tmp / name, state_dict=state_dict)
                self.tokenizer.save_pretrained(tmp / name)
        if D.is_main():
            state = {"iteration": iteration, "world_size": self.world,
                     "eval_results": self.eval_results, "config": to_dict(self.cfg)}
            (tmp / "trainer_state.json").write_text(json.dumps(state))
        self._barrier()  # every rank's own state files are written
        if D.is_main():
            (tmp / CHECKPOINT_MARKER).write_text("ok\n")
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        self._barrier()
        return final

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict[str, Any]:
        """Run (or continue) the configured iterations, then evaluate; returns ``eval.json``'s content.

        SIGINT/SIGTERM end the run after the current iteration with a checkpoint and return
        ``{"stopped": True, "iteration": k}`` (no evaluation); a second signal aborts at once.

        Raises:
            NumericalFault: more than ``ppo.max_skipped_steps`` optimizer steps in a row were
                skipped (a checkpoint of the iteration is written first).
        """
        cfg = self.cfg
        logger = None
        if D.is_main():
            wandb_cfg = None
            if cfg.logging.wandb:
                wandb_cfg = {"project": cfg.logging.wandb_project, "mode": cfg.logging.wandb_mode,
                             "name": cfg.name, "config": to_dict(cfg)}
            logger = MetricLogger(self.run_dir, total_iterations=cfg.iterations, start_iteration=self.start_iteration,
                                  wandb_config=wandb_cfg, progress=cfg.logging.progress)
        self.stop_signals.install()
        try:
            if self.start_iteration == 0 and cfg.eval.baseline and D.is_main():
                for greedy in (True, False):
                    r = self.run_eval("untrained", greedy=greedy)
                    self._say(logger, f"untrained policy ({'greedy' if greedy else 'sampled'}): success "
                                      f"{r.success_mean:.3f} ± {r.success_se:.3f} over {r.episodes} episodes")
            if self.critic is None and cfg.ppo.critic_warmup_iterations:
                self._say(logger, f"ppo.critic_warmup_iterations={cfg.ppo.critic_warmup_iterations} not used: "
                                  f"algo.algorithm={cfg.algo.algorithm} trains no critic")
            last = cfg.iterations
            for it in range(self.start_iteration, cfg.iterations):
                warm = self.critic is not None and it < cfg.ppo.critic_warmup_iterations
                times: dict[str, float] = {}
                tic = time.perf_counter()
                batch, stats, algo_metrics = self.collect()
                times["rollout"] = time.perf_counter() - tic
                if cfg.rollout.vllm_sleep_between_updates:  # free the KV cache and weights for the update
                    tic = time.perf_counter()
                    self.engine.sleep()
                    times["engine_sleep"] = time.perf_counter() - tic
                turns = int(D.all_reduce_sum(torch.tensor([float(stats.turns)], device=D.device())).item())
                trainable = D.all_reduce_min(torch.tensor([float(batch.num_real_turns)], device=D.device())).item()
                if trainable > 0:
                    tic = time.perf_counter()
                    rows = self.score(batch)
                    algo_metrics.update(self.compute_advantages(batch))
                    times["scoring"] = time.perf_counter() - tic
                    tic = time.perf_counter()
                    upd = self.update(batch, rows, train_actor=not warm)
                    times["update"] = time.perf_counter() - tic
                else:  # dynamic sampling kept no group on some rank: nothing to learn from
                    upd = {"update/skipped_no_signal": 1.0}
                tic = time.perf_counter()
                if not warm:
                    self.sync_weights()  # a sleeping vLLM engine wakes its weights, loads, then its KV cache
                if getattr(self.engine, "asleep", False):  # critic warm-up: no new weights, wake as it was
                    self.engine.wake_up()
                times["sync"] = time.perf_counter() - tic
                self._turns_done += turns
                if cfg.logging.dump_batch_every and (it + 1) % cfg.logging.dump_batch_every == 0 and D.is_main():
                    (self.run_dir / "batches").mkdir(exist_ok=True)
                    batch.save(self.run_dir / "batches" / f"iter_{it + 1:06d}.pt")
                metrics = {**self._metrics(it, batch, stats, upd, times, warm, turns), **algo_metrics}
                for message in stats.env_fault_messages:
                    self._say(logger, f"iteration {it + 1}: environment fault, env restarted: {message}")
                if cfg.eval.every and (it + 1) % cfg.eval.every == 0 and D.is_main():
                    r = self.run_eval(f"iter_{it + 1}", greedy=cfg.eval.greedy)
                    metrics["eval/success"] = r.success_mean
                if logger is not None:
                    logger.log(metrics)
                saved = bool(cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0 and it + 1 < cfg.iterations)
                if saved:
                    self.save_checkpoint(it + 1)
                if self._consecutive_skips() > cfg.ppo.max_skipped_steps:
                    ckpt = self.save_checkpoint(it + 1) if not saved else self._checkpoint_dir(it + 1)
                    raise NumericalFault(
                        f"{self._consecutive_skips()} optimizer steps in a row were skipped for a non-finite "
                        f"loss or gradient norm (ppo.max_skipped_steps={cfg.ppo.max_skipped_steps}); stopped after "
                        f"iteration {it + 1} with a checkpoint in {ckpt}")
                if self._stop_agreed():
                    if not saved:
                        self.save_checkpoint(it + 1)
                    self._say(logger, f"stopped by {self.stop_signals.requested or 'a signal on another rank'} after "
                                      f"iteration {it + 1}; resume with: {self.resume_command()}")
                    return {"stopped": True, "iteration": it + 1}
                if cfg.turn_budget and self._turns_done >= cfg.turn_budget:
                    last = it + 1
                    self._say(logger, f"turn budget reached: {self._turns_done} turns after iteration {last}")
                    break
            self.save_checkpoint(last)
            if D.is_main():
                for greedy in (True, False):
                    r = self.run_eval("trained", greedy=greedy)
                    self._say(logger, f"trained policy ({'greedy' if greedy else 'sampled'}): success "
                                      f"{r.success_mean:.3f} ± {r.success_se:.3f} over {r.episodes} episodes")
                self._write_eval_json()
        finally:
            self.stop_signals.restore()
            if logger is not None:
                logger.close()
            if self.venv is not None:
                self.venv.close()
            if self.agent:
                self.collector.close()
        return json.loads((self.run_dir / "eval.json").read_text()) if D.is_main() else {}

    def resume_command(self) -> str:
        """The command line that continues this run from its newest checkpoint."""
        return f"verlog-train {self.run_dir / 'config.yaml'} resume={self.run_dir}"

    def _stop_agreed(self) -> bool:
        """Whether any rank caught a stop signal (all ranks stop after the same iteration)."""
        flag = torch.tensor([1.0 if self.stop_signals.requested is not None else 0.0], device=D.device())
        return bool(D.all_reduce_sum(flag).item() > 0)

    @staticmethod
    def _say(logger: MetricLogger | None, message: str) -> None:
        if logger is not None:
            logger.write(message)
        else:
            print(message, flush=True)


def _check_state_keys(cfg: TrainConfig) -> None:
    """GiGPO groups turns by exact state: refuse an env that does not report state keys.

    Raises:
        ConfigError: one line naming ``algo.algorithm`` and the env.
    """
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    try:
        env.reset(seed=0)
        env.unwrapped.state_key
    except NotImplementedError:
        raise ConfigError(f"algo.algorithm: gigpo groups turns by exact game state, and {cfg.env.task} does not "
                          "report a state key (TextEnv.state_key); use grpo or another algorithm") from None
    finally:
        env.close()


def _merge_stats(into: CollectStats, more: CollectStats) -> None:
    """Add the statistics of another collection round to ``into``."""
    for f in fields(CollectStats):
        setattr(into, f.name, getattr(into, f.name) + getattr(more, f.name))


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else math.nan


def _grad_norm(engine: Any) -> float:
    norm = engine.get_global_grad_norm()
    return float(norm) if norm is not None else math.nan
