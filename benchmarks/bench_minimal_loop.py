"""P0 minimal loop: Verlog's end-to-end training turns/s against a single-file PPO loop, in pairs.

    python benchmarks/bench_minimal_loop.py [--pairs 5 --iterations 1 --threads 1] [--quick] [key=value ...]
    python benchmarks/bench_minimal_loop.py --learning --turns 15360 [--plot PATH] [--out DIR]

The yardstick of the whole framework. Side B is a PPO loop of the kind CleanRL writes, all in this
file (:class:`MinimalPPO`): direct torch on stock transformers modules, nothing of Verlog's trainer,
collector, memory, algorithms, batch or micro-batching; from Verlog it takes only the text
environment (``verlog.envs.make_env``, which also parses the reply) and the tiny recipe's tokenizer
and initial weights (the directory ``verlog.builders.build_tiny_for`` writes). It runs the same
work as the ``tiny`` recipe (``recipes/tiny.yaml``):

* the same model: transformers' ``Qwen2ForCausalLM`` loaded from the tiny model's directory (the
  same config, the same parameter count, the same initial weights), and a critic of the same
  backbone with a fresh scalar head (zero weight, zero bias), as Verlog's critic;
* the same task and prompt: ``babyai/easy_goto`` with the recipe's env settings; the prompt is the
  ChatML text of Verlog's window memory with no history (system: the instruction; user:
  ``"Current observation:\\n"`` + the observation), written out here and tokenised in one call;
* the same batch: ``env.num_envs`` x ``rollout.turns_per_env`` turns per iteration, episodes running
  across iterations (same-step reset), replies sampled at temperature 1 with at most
  ``rollout.max_response_tokens`` tokens (a KV-cached sampling loop written here);
* turn-level GAE (:func:`turn_gae`): one value per turn (the critic at the prompt's last token),
  gamma/lambda across turns, unfinished episodes bootstrapped with the critic's value of the
  next prompt at the batch end (and of the final observation of a truncated episode); advantages
  whitened over the reply tokens;
* PPO's clipped policy loss over the reply tokens (with Verlog's default dual clip), a clipped value
  loss, ``ppo.epochs`` x ``ppo.minibatches`` AdamW steps of each with the recipe's learning rates and
  gradient clipping, actor frozen during ``ppo.critic_warmup_iterations``; the format warm-up of the
  recipe (``ACTION: <random valid action>`` on random-play prompts) before RL.

Where B is plainly cheaper by design: the behaviour logprobs of the sampling pass are the PPO
``old`` logprobs (no scoring pass of the actor), the critic values the prompts during the rollout,
one model serves rollout and training (no weight sync), envs step in-process.

**Throughput** (default): side A is Verlog's trainer (:class:`verlog.trainer.Trainer`) built from the
tiny recipe with ``threads=--threads`` and ``ppo.critic_warmup_iterations=0`` (every iteration is a
full PPO iteration on both sides), driven in-process one ``Trainer.iteration`` at a time. Both sides
start from the same weights (the tiny model after Verlog's format warm-up, when it is on) and the
same env seeds. The two sides run interleaved, A B A B ... (``benchmarks/paired.py``; one untimed
call of each first); a call runs ``--iterations`` iterations and returns its wall-clock seconds per
turn (the whole iteration: collect, score, advantages, update, sync). The ratio of a pair is A's
turns/s / B's turns/s (goal >= 0.80), the result the median of the per-pair ratios with their min-max;
per-phase seconds of both sides are printed beside it.

**Learning at equal turns** (``--learning``): both train from the tiny model (each with its own
format warm-up) for ``--turns`` turns (rounded up to whole iterations), the recipe otherwise
unchanged, Verlog first and then the loop; per iteration the success rate and mean return of the
episodes that ended in it are recorded. Prints both curves and their last figures, writes them as
JSON and a PNG plot (``--plot``, default ``<--out>/p0_learning.png``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Result, add_common_args, load_note, preset_threads, report, threads_note  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before torch is imported
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import AutoTokenizer, DynamicCache, Qwen2ForCausalLM  # noqa: E402

from verlog.envs import make_env  # noqa: E402  (the environment: the one Verlog piece side B uses)

GOAL = 0.80
ROOT = Path(__file__).resolve().parents[1]


# ================================================================================ the minimal loop
@dataclass
class LoopConfig:
    """Everything the minimal loop needs, as plain values (:func:`loop_config` reads them from a recipe).

    Attributes:
        task, env_kwargs: the environment (``make_env(task, **env_kwargs)``).
        num_envs, turns_per_env: N and T; an iteration collects T x N turns.
        max_response_tokens, max_prompt_tokens, temperature: generation and the prompt budget.
        gamma, lam: the discount and GAE lambda across turns.
        actor_lr, critic_lr, weight_decay, epochs, minibatches, micro_batch_size, max_grad_norm,
        clip_low, clip_high, dual_clip, value_clip, value_coef, critic_warmup_iterations: the update.
        warmup_steps, warmup_batch_size, warmup_lr, warmup_episodes: the format warm-up.
        seed: seeds the sampling and shuffling streams and (``env_seed``) the envs: env i starts with
            ``env_seed + i``.
    """

    task: str = "babyai/easy_goto"
    env_kwargs: dict = field(default_factory=dict)
    num_envs: int = 32
    turns_per_env: int = 16
    max_response_tokens: int = 12
    max_prompt_tokens: int = 512
    temperature: float = 1.0
    gamma: float = 0.99
    lam: float = 0.95
    whiten: bool = True
    actor_lr: float = 5e-4
    critic_lr: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 4
    minibatches: int = 8
    micro_batch_size: int = 64
    max_grad_norm: float = 0.5
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = 3.0
    value_clip: float | None = 0.2
    value_coef: float = 1.0
    critic_warmup_iterations: int = 3
    warmup_steps: int = 300
    warmup_batch_size: int = 32
    warmup_lr: float = 1e-3
    warmup_episodes: int = 32
    seed: int = 0
    env_seed: int = 0


class ValueModel(torch.nn.Module):
    """The critic: a decoder backbone and a scalar head on its last hidden states.

    The same network as a transformers ``Qwen2ForTokenClassification`` with one label: the head is
    ``Linear(hidden, 1)`` with bias, initialised to zero (weight and bias), as Verlog's fresh critic.
    """

    def __init__(self, backbone: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, index: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Values at one position per row.

        Args:
            input_ids: [B, S] long; index: [B] long, the position to value in each row.
            attention_mask, position_ids: [B, S], for left-padded rows (None: right padding or none).

        Returns:
            [B] float32, the head's output at ``index``.
        """
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False).last_hidden_state
        return self.head(hidden[torch.arange(len(index)), index]).squeeze(-1).float()


def render_prompt(instruction: str, observation: str, context: str = "") -> str:
    """The prompt text of a turn: ChatML with the instruction as system message and the current
    observation as user message, ending with the assistant header (Verlog's window memory with no
    history renders the same text; its chat template is plain ChatML here)."""
    user = "Current observation:\n" + observation + ("\n\n" + context if context else "")
    return (f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def turn_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
             bootstrap: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn-level GAE over a fixed-turn batch (Schulman et al. 2016, eq. 16: A_t = sum_l (gamma lam)^l delta_{t+l}).

    delta_t = r_t + gamma (1 - d_t) V'_t - V_t, A_t = delta_t + gamma lam c_t A_{t+1}, where d_t = 1
    when the episode terminated after turn t, V'_t = V_{t+1} when the episode goes on inside the
    batch, else ``bootstrap[t]`` (turn T-1, or a truncated episode: the critic's value of the
    observation that followed), and c_t = 1 only when the episode goes on inside the batch.

    Args:
        rewards, values, bootstrap: float [T, N].
        terminated, truncated: bool [T, N] (a turn is never both).

    Returns:
        (advantages, returns), each float [T, N]; returns = advantages + values.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    carry = torch.zeros_like(rewards[0])
    for t in range(T - 1, -1, -1):
        leaves = truncated[t] | terminated[t] if t < T - 1 else torch.ones_like(terminated[t])
        next_value = bootstrap[t] if t == T - 1 else torch.where(truncated[t], bootstrap[t], values[t + 1])
        next_value = torch.where(terminated[t], torch.zeros_like(next_value), next_value)
        delta = rewards[t] + gamma * next_value - values[t]
        carry = delta + gamma * lam * torch.where(leaves, torch.zeros_like(carry), carry)
        advantages[t] = carry
    return advantages, advantages + values


def ppo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                    clip_low: float, clip_high: float, dual_clip: float | None, n_tokens: float) -> torch.Tensor:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), negated, summed over the reply tokens and
    divided by ``n_tokens`` (the minibatch's tokens: token-mean); with ``dual_clip`` c, the loss of a
    token with a negative advantage is capped at -c A (dual-clip PPO, Ye et al. 2020).

    Args:
        logp, old_logp, adv: float [B, R]; mask: bool [B, R], the reply tokens.

    Returns:
        0-dim loss.
    """
    ratio = torch.exp(logp - old_logp)
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)
    return torch.where(mask, loss, 0.0).sum() / n_tokens


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float | None) -> torch.Tensor:
    """0.5 max((V - R)^2, (clip(V, V_old +- eps) - R)^2), averaged over the turns (OpenAI baselines' ppo2
    value clipping). All arguments float [B]; returns a 0-dim loss."""
    err = (values - returns) ** 2
    if clip is not None:
        err = torch.maximum(err, (old_values + (values - old_values).clamp(-clip, clip) - returns) ** 2)
    return 0.5 * err.mean()


@dataclass
class Rollout:
    """One iteration's turns (T turns x N envs, R = the longest reply).

    Attributes:
        prompts, replies: [T][N] token-id lists (a reply ends with eos unless cut at the limit).
        logprobs: [T][N] lists of the sampled tokens' logprobs (the behaviour policy's).
        values, rewards, bootstrap: float [T, N]; terminated, truncated: bool [T, N].
        episodes: (return, success, length) of each episode that ended during the iteration.
    """

    prompts: list
    replies: list
    logprobs: list
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    bootstrap: torch.Tensor
    episodes: list


class MinimalPPO:
    """The minimal PPO loop (see the module docstring): :meth:`format_warmup` once, then :meth:`iteration`.

    Args:
        cfg: the loop's settings.
        model_dir: a Qwen2 causal-LM directory with its tokenizer (the tiny model's, or Verlog's
            format-warmed copy of it); the actor and the critic's backbone start from its weights.
    """

    def __init__(self, cfg: LoopConfig, model_dir: str | Path) -> None:
        self.cfg = cfg
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.eos = int(self.tok.eos_token_id)
        self.pad = int(self.tok.pad_token_id)
        self.actor = Qwen2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.critic = ValueModel(copy.deepcopy(self.actor.model), self.actor.config.hidden_size)
        self.actor_opt = torch.optim.AdamW(self.actor.parameters(), lr=cfg.actor_lr, weight_decay=cfg.weight_decay)
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=cfg.critic_lr, weight_decay=cfg.weight_decay)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.envs = [make_env(cfg.task, **cfg.env_kwargs) for _ in range(cfg.num_envs)]
        self.obs: list[tuple[str, str, str]] = []  # (instruction, observation, context) per env
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=cfg.env_seed + i)
            self.obs.append((info["instruction"], obs, info["context"]))
        self.returns = [0.0] * cfg.num_envs
        self.lengths = [0] * cfg.num_envs
        self.iterations_done = 0

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            env.close()

    # ---------------------------------------------------------------- prompts and sampling
    def encode_prompts(self, texts: list[tuple[str, str, str]]) -> list[list[int]]:
        """Token ids of each (instruction, observation, context) prompt, in one tokenizer call.

        Raises:
            ValueError: a prompt longer than ``max_prompt_tokens`` (the tiny task's are ~90 tokens).
        """
        ids = self.tok([render_prompt(*t) for t in texts], add_special_tokens=False)["input_ids"]
        longest = max(len(p) for p in ids)
        if longest > self.cfg.max_prompt_tokens:
            raise ValueError(f"a prompt of {longest} tokens exceeds max_prompt_tokens={self.cfg.max_prompt_tokens}")
        return ids

    def left_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, P] ids, attention mask and position ids of left-padded prompts."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)

    @torch.no_grad()
    def sample(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """Sample one reply per prompt (temperature, at most ``max_response_tokens``, stop at eos) with
        a KV cache; returns the reply ids and their logprobs (log-softmax of the raw logits)."""
        ids, mask, pos = self.left_padded(prompts)
        B = len(prompts)
        cache = DynamicCache()
        logits = self.actor(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                            use_cache=True, logits_to_keep=1).logits[:, -1]
        next_pos = mask.sum(-1, keepdim=True)
        done = torch.zeros(B, dtype=torch.bool)
        tokens, logps = [], []
        for step in range(self.cfg.max_response_tokens):
            logp_all = torch.log_softmax(logits.float(), -1)
            probs = torch.softmax(logits.float() / self.cfg.temperature, -1)
            tok = torch.multinomial(probs, 1, generator=self.gen).squeeze(1)
            tok = torch.where(done, self.pad, tok)
            tokens.append(tok)
            logps.append(logp_all.gather(1, tok.unsqueeze(1)).squeeze(1))
            done = done | (tok == self.eos)
            if bool(done.all()) or step == self.cfg.max_response_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
            logits = self.actor(input_ids=tok.unsqueeze(1), attention_mask=mask, position_ids=next_pos,
                                past_key_values=cache, use_cache=True).logits[:, -1]
            next_pos = next_pos + 1
        toks, lps = torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist()
        replies, logprobs = [], []
        for row, row_lp in zip(toks, lps):
            n = row.index(self.eos) + 1 if self.eos in row else len(row)
            replies.append(row[:n])
            logprobs.append(row_lp[:n])
        return replies, logprobs

    @torch.no_grad()
    def prompt_values(self, prompts: list[list[int]]) -> torch.Tensor:
        """[B] critic values of prompts (at each prompt's last token)."""
        ids, mask, pos = self.left_padded(prompts)
        return self.critic(ids, torch.full((len(prompts),), ids.shape[1] - 1), mask, pos)

    # ---------------------------------------------------------------- rollout
    def collect(self) -> Rollout:
        """T turns of every env; episodes that end reset at once and go on into the next iteration."""
        cfg = self.cfg
        T, N = cfg.turns_per_env, cfg.num_envs
        rewards, values, bootstrap = torch.zeros(T, N), torch.zeros(T, N), torch.zeros(T, N)
        terminated, truncated = torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.bool)
        prompts_all, replies_all, logprobs_all, episodes = [], [], [], []
        prompts = self.encode_prompts(self.obs)
        for t in range(T):
            values[t] = self.prompt_values(prompts)
            replies, logprobs = self.sample(prompts)
            texts = self.tok.batch_decode(replies, skip_special_tokens=True)
            cut: dict[int, tuple[str, str, str]] = {}
            for n, (env, text) in enumerate(zip(self.envs, texts)):
                obs, reward, term, trunc, info = env.step(text)
                rewards[t, n], terminated[t, n], truncated[t, n] = reward, term, trunc
                self.returns[n] += reward
                self.lengths[n] += 1
                self.obs[n] = (info["instruction"], obs, info["context"])
                if term or trunc:
                    episodes.append((self.returns[n], bool(info["success"]), self.lengths[n]))
                    self.returns[n], self.lengths[n] = 0.0, 0
                    if trunc:
                        cut[n] = self.obs[n]  # value the observation that followed the cut
                    obs, info = env.reset()
                    self.obs[n] = (info["instruction"], obs, info["context"])
            if cut:
                bootstrap[t, list(cut)] = self.prompt_values(self.encode_prompts(list(cut.values())))
            prompts_all.append(prompts)
            replies_all.append(replies)
            logprobs_all.append(logprobs)
            prompts = self.encode_prompts(self.obs)
        bootstrap[T - 1] = torch.where(truncated[T - 1], bootstrap[T - 1], self.prompt_values(prompts))
        return Rollout(prompts_all, replies_all, logprobs_all, values, rewards, terminated, truncated, bootstrap,
                       episodes)

    # ---------------------------------------------------------------- update
    def reply_logprobs(self, rows: torch.Tensor, positions: torch.Tensor, replies: torch.Tensor) -> torch.Tensor:
        """Logprobs of the reply tokens under the actor (with grad).

        Args:
            rows: [B, S] long, prompt + reply, right-padded (no real token attends to a pad, so the
                plain causal mask will do: no attention mask, no position ids).
            positions: [B, R] long, the position whose output predicts reply token k (prompt length
                - 1 + k; clamped into the row here).
            replies: [B, R] long, the reply ids (padding slots: any id).

        Returns:
            [B, R] float32; padding slots hold arbitrary values. The LM head runs on the R
            gathered positions only.
        """
        hidden = self.actor.model(input_ids=rows, use_cache=False).last_hidden_state
        index = positions.clamp(max=rows.shape[1] - 1).unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        logits = self.actor.lm_head(hidden.gather(1, index)).float()
        return torch.log_softmax(logits, -1).gather(-1, replies.unsqueeze(-1)).squeeze(-1)

    def update(self, ro: Rollout, train_actor: bool) -> dict[str, float]:
        """``epochs`` x ``minibatches`` AdamW steps of the actor (unless ``train_actor`` is False) and the
        critic on the rollout's turns; returns the last step's losses."""
        cfg = self.cfg
        adv, ret = turn_gae(ro.rewards, ro.values, ro.terminated, ro.truncated, ro.bootstrap, cfg.gamma, cfg.lam)
        prompts = [p for row in ro.prompts for p in row]
        replies = [r for row in ro.replies for r in row]
        M, R = len(prompts), max(len(r) for r in replies)
        plen = torch.tensor([len(p) for p in prompts])
        rlen = torch.tensor([len(r) for r in replies])
        S = int((plen + rlen).max())
        rows = torch.full((M, S), self.pad, dtype=torch.long)  # right-padded prompt + reply
        resp = torch.full((M, R), self.pad, dtype=torch.long)
        old = torch.zeros(M, R)
        for i, (p, r, lp) in enumerate(zip(prompts, replies, (x for row in ro.logprobs for x in row))):
            rows[i, : len(p)] = torch.tensor(p)
            rows[i, len(p): len(p) + len(r)] = torch.tensor(r)
            resp[i, : len(r)] = torch.tensor(r)
            old[i, : len(r)] = torch.tensor(lp)
        mask = torch.arange(R) < rlen.unsqueeze(1)
        adv, ret, old_values = adv.flatten(), ret.flatten(), ro.values.flatten()
        if cfg.whiten:  # over the reply tokens: each turn weighs its reply length
            w = rlen.float()
            mean = (w * adv).sum() / w.sum()
            adv = (adv - mean) / torch.sqrt((w * (adv - mean) ** 2).sum() / w.sum() + 1e-8)
        positions = (plen.unsqueeze(1) - 1 + torch.arange(R)).clamp(max=S - 1)  # output that predicts reply token k
        out: dict[str, float] = {}
        self.actor.train()
        self.critic.train()
        for _ in range(cfg.epochs):
            for idx in torch.randperm(M, generator=self.gen).tensor_split(cfg.minibatches):
                n_tok = max(float(mask[idx].sum()), 1.0)
                micro = idx.split(cfg.micro_batch_size)
                if train_actor:
                    for mi in micro:
                        width = int((plen[mi] + rlen[mi]).max())
                        logp = self.reply_logprobs(rows[mi, :width], positions[mi], resp[mi])
                        loss = ppo_policy_loss(logp, old[mi], adv[mi].unsqueeze(1).expand(-1, R), mask[mi],
                                               cfg.clip_low, cfg.clip_high, cfg.dual_clip, n_tok)
                        loss.backward()
                        out["pg_loss"] = loss.item()
                    torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
                    self.actor_opt.step()
                    self.actor_opt.zero_grad(set_to_none=True)
                for mi in micro:
                    width = int(plen[mi].max())
                    v = self.critic(rows[mi, :width], plen[mi] - 1)
                    loss = cfg.value_coef * clipped_value_loss(v, old_values[mi], ret[mi], cfg.value_clip)
                    loss = loss * len(mi) / len(idx)  # the minibatch's mean over its turns
                    loss.backward()
                    out["value_loss"] = loss.item()
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_opt.step()
                self.critic_opt.zero_grad(set_to_none=True)
        self.actor.eval()
        self.critic.eval()
        return out

    def iteration(self) -> dict[str, Any]:
        """Collect, advantages and update once; returns the iteration's figures (turns, seconds per
        phase, episodes that ended, their success rate and mean return, reply tokens)."""
        cfg = self.cfg
        train_actor = self.iterations_done >= cfg.critic_warmup_iterations
        tic = time.perf_counter()
        ro = self.collect()
        mid = time.perf_counter()
        losses = self.update(ro, train_actor)
        end = time.perf_counter()
        self.iterations_done += 1
        eps = ro.episodes
        return {"iteration": self.iterations_done, "turns": cfg.turns_per_env * cfg.num_envs,
                "time/rollout": mid - tic, "time/update": end - mid, "seconds": end - tic,
                "episodes": len(eps),
                "success": statistics.fmean(e[1] for e in eps) if eps else math.nan,
                "return": statistics.fmean(e[0] for e in eps) if eps else math.nan,
                "response_tokens_mean": statistics.fmean(len(r) for row in ro.replies for r in row), **losses}

    # ---------------------------------------------------------------- format warm-up
    def format_warmup(self) -> list[float]:
        """Teach the reply format before RL: ``warmup_steps`` AdamW steps (``warmup_lr``) on batches of
        ``warmup_batch_size`` random-play prompts, each with the target ``ACTION: <a random valid
        action><eos>`` (the recipe's warm-up: it carries no information about which action is good).
        Returns the per-step mean target NLL (nats/token)."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        examples: list[tuple[list[int], list[str]]] = []
        env = make_env(cfg.task, **cfg.env_kwargs)
        for ep in range(cfg.warmup_episodes):  # random play: the prompts and every valid reply there
            obs, info = env.reset(seed=cfg.seed + 77 + ep)
            done = False
            while not done:
                examples.append((self.encode_prompts([(info["instruction"], obs, info["context"])])[0],
                                 [f"ACTION: {a}" for a in info["valid_actions"]]))
                obs, _, term, trunc, info = env.step(f"ACTION: {rng.choice(info['valid_actions'])}")
                done = term or trunc
        env.close()
        opt = torch.optim.AdamW(self.actor.parameters(), lr=cfg.warmup_lr)
        self.actor.train()
        losses = []
        for _ in range(cfg.warmup_steps):
            picked = [examples[rng.randrange(len(examples))] for _ in range(cfg.warmup_batch_size)]
            pairs = [(p, self.tok.encode(rng.choice(rs), add_special_tokens=False) + [self.eos]) for p, rs in picked]
            S = max(len(p) + len(r) for p, r in pairs)
            ids = torch.full((len(pairs), S), self.pad, dtype=torch.long)
            labels = torch.full((len(pairs), S), -100, dtype=torch.long)
            for i, (p, r) in enumerate(pairs):
                ids[i, : len(p) + len(r)] = torch.tensor(p + r)
                labels[i, len(p): len(p) + len(r)] = torch.tensor(r)
            logits = self.actor(input_ids=ids, use_cache=False).logits[:, :-1]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        self.actor.eval()
        return losses


# ================================================================================ the benchmark
def loop_config(cfg: Any, **changes: Any) -> LoopConfig:
    """The minimal loop's settings from a Verlog ``TrainConfig`` (the same recipe), with ``changes``."""
    env_seed = cfg.seed * 100_003  # Verlog's collector seed on rank 0: env i starts with it + i
    out = LoopConfig(
        task=cfg.env.task, env_kwargs=cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step),
        num_envs=cfg.env.num_envs, turns_per_env=cfg.rollout.turns_per_env,
        max_response_tokens=cfg.rollout.max_response_tokens, max_prompt_tokens=cfg.memory.max_prompt_tokens,
        temperature=cfg.rollout.temperature, gamma=cfg.gae.gamma_step, lam=cfg.gae.lam_step,
        whiten=cfg.gae.whiten_advantages, actor_lr=cfg.ppo.actor_lr, critic_lr=cfg.ppo.critic_lr,
        weight_decay=cfg.ppo.weight_decay, epochs=cfg.ppo.epochs, minibatches=cfg.ppo.minibatches,
        micro_batch_size=cfg.ppo.micro_batch_size, max_grad_norm=cfg.ppo.max_grad_norm, clip_low=cfg.ppo.clip_low,
        clip_high=cfg.ppo.clip_high, dual_clip=cfg.ppo.dual_clip, value_clip=cfg.ppo.value_clip,
        value_coef=cfg.ppo.value_coef, critic_warmup_iterations=cfg.ppo.critic_warmup_iterations,
        warmup_steps=cfg.format_warmup.steps, warmup_batch_size=cfg.format_warmup.batch_size,
        warmup_lr=cfg.format_warmup.lr, warmup_episodes=cfg.format_warmup.episodes, seed=cfg.seed, env_seed=env_seed)
    for key, value in changes.items():
        setattr(out, key, value)
    return out


def check_recipe(cfg: Any) -> None:
    """Refuse recipe settings the minimal loop does not implement (it would then not do the same work).

    Raises:
        SystemExit: with one line naming the setting.
    """
    problems = []
    if cfg.algo.algorithm != "ppo":
        problems.append(f"algo.algorithm={cfg.algo.algorithm}")
    if cfg.memory.type != "window" or cfg.memory.history_turns != 0 or cfg.memory.reply_prefix or cfg.memory.reply_hint:
        problems.append("memory other than window with history_turns=0")
    if cfg.gae.gamma_token != 1.0 or cfg.gae.lam_token != 1.0:
        problems.append("gae.gamma_token/lam_token != 1")
    if cfg.ppo.kl_coef or cfg.ppo.entropy_coef or cfg.ppo.micro_batch_tokens or cfg.ppo.target_kl is not None:
        problems.append("ppo.kl_coef/entropy_coef/micro_batch_tokens/target_kl")
    if cfg.rollout.top_p != 1.0 or cfg.rollout.top_k > 0 or cfg.rollout.max_staleness:
        problems.append("rollout.top_p/top_k/max_staleness")
    if cfg.model.path != "tiny" or cfg.model.lora_rank or cfg.model.trainable_layers is not None:
        problems.append("model other than the whole tiny model")
    if problems:
        raise SystemExit(f"bench_minimal_loop: the minimal loop does not implement {', '.join(problems)}")


def verlog_config(overrides: list[str], run_root: str, name: str) -> Any:
    """The tiny recipe with the benchmark's overrides (no evaluations, no progress bar)."""
    from verlog.config import load_recipe

    return load_recipe("tiny", ["eval.baseline=false", "logging.progress=false", f"run_root={run_root}",
                                f"name={name}", *overrides])


class VerlogSide:
    """Verlog's trainer driven in-process, one :meth:`Trainer.iteration` at a time."""

    def __init__(self, cfg: Any) -> None:
        from verlog.trainer import Trainer

        self.trainer = Trainer(cfg)
        self.it = 0

    @property
    def initial_path(self) -> Path:
        """Where the run's actor started (the format-warmed model, or the tiny model itself)."""
        from verlog.builders import base_model_path

        cfg = self.trainer.cfg
        return self.trainer.run_dir / "format_warmup" if cfg.format_warmup.steps > 0 else Path(base_model_path(cfg))

    def iteration(self) -> dict[str, Any]:
        """One iteration; its metrics row with the wall-clock ``seconds`` of the call added."""
        tic = time.perf_counter()
        row = self.trainer.iteration(self.it)
        row["seconds"] = time.perf_counter() - tic
        self.it += 1
        return row

    def close(self) -> None:
        """Stop the collector's environments."""
        self.trainer.prefetch.close()
        self.trainer.collector.close()


def parameter_count(module: torch.nn.Module) -> int:
    """Distinct parameters (tied ones once)."""
    return sum(p.numel() for p in module.parameters())


def seconds_per_turn(rows: list[dict[str, Any]]) -> float:
    """Wall-clock seconds per turn over iteration rows (each with ``seconds`` and ``turns`` of its own)."""
    return sum(r["seconds"] for r in rows) / sum(r["iter_turns"] for r in rows)


def throughput(args: argparse.Namespace) -> int:
    """The paired throughput measurement (module docstring); prints the figures and the result line."""
    from paired import interleave, spread

    overrides = [f"threads={args.threads}", "ppo.critic_warmup_iterations=0"]
    if args.quick:
        overrides += ["env.num_envs=4", "rollout.turns_per_env=4", "ppo.epochs=1", "ppo.minibatches=2",
                      "ppo.micro_batch_size=8", "format_warmup.steps=0"]
    with tempfile.TemporaryDirectory(prefix="bench_minimal_loop_") as tmp:
        cfg = verlog_config([*overrides, *args.overrides], tmp, "p0")
        check_recipe(cfg)
        torch.set_num_threads(args.threads)
        a = VerlogSide(cfg)  # runs the format warm-up when the recipe has one
        b = MinimalPPO(loop_config(cfg), a.initial_path)  # the same starting weights
        torch.set_num_threads(args.threads)
        print(f"bench_minimal_loop: {cfg.env.task}, {cfg.env.num_envs} envs x {cfg.rollout.turns_per_env} turns = "
              f"{cfg.env.num_envs * cfg.rollout.turns_per_env} turns per iteration, {cfg.ppo.epochs} epochs x "
              f"{cfg.ppo.minibatches} minibatches; actor {parameter_count(b.actor):,} parameters (Verlog "
              f"{parameter_count(a.trainer.models.actor.module):,}), critic {parameter_count(b.critic):,} "
              f"(Verlog {parameter_count(a.trainer.models.critic.module):,}); start: {a.initial_path.name}",
              flush=True)
        rows: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}

        def side(name: str, step: Callable[[], dict[str, Any]], turns: int) -> Callable[[], float]:
            def call() -> float:
                got = []
                for _ in range(args.iterations):
                    row = step()
                    row["iter_turns"] = turns
                    got.append(row)
                rows[name].extend(got)
                return seconds_per_turn(got)
            return call

        turns = cfg.env.num_envs * cfg.rollout.turns_per_env
        try:
            times = interleave(side("A", a.iteration, turns), side("B", b.iteration, turns), pairs=args.pairs)
        finally:
            a.close()
            b.close()
    timed = {k: v[-args.pairs * args.iterations:] for k, v in rows.items()}  # the warm-up pair left out
    va, vb = 1.0 / spread(times.a).median, 1.0 / spread(times.b).median
    med = lambda xs: statistics.median(xs) if xs else math.nan  # noqa: E731
    phases_a = sorted({k for r in timed["A"] for k in r if k.startswith("time/")})
    print("seconds per iteration (medians): Verlog " + ", ".join(
        f"{k[5:]} {med([r[k] for r in timed['A']]):.2f}" for k in phases_a)
        + f", whole call {med([r['seconds'] for r in timed['A']]):.2f}; minimal loop rollout "
        f"{med([r['time/rollout'] for r in timed['B']]):.2f}, advantages + update "
        f"{med([r['time/update'] for r in timed['B']]):.2f}, whole {med([r['seconds'] for r in timed['B']]):.2f}")
    print(f"reply tokens per turn (medians): Verlog "
          f"{med([r['rollout/response_tokens_mean'] for r in timed['A']]):.2f}, "
          f"minimal loop {med([r['response_tokens_mean'] for r in timed['B']]):.2f}; {args.iterations} iteration(s) "
          f"per call; {threads_note(args.threads)}; {load_note()}")
    report(Result.of("P0", "minimal", f"Verlog {va:.1f} turns/s vs minimal loop {vb:.1f} turns/s",
                     f">= {GOAL:.2f}", times.rate_ratios(), args.threads), args.json)
    return 0


def learning(args: argparse.Namespace) -> int:
    """Train Verlog's tiny recipe and the minimal loop for the same turns; print, save and plot both curves."""
    from verlog.builders import base_model_path

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    overrides = [f"threads={args.threads}"]
    curves: dict[str, list[dict[str, float]]] = {"verlog": [], "minimal": []}
    with tempfile.TemporaryDirectory(prefix="bench_minimal_loop_") as tmp:
        cfg = verlog_config([*overrides, *args.overrides], tmp, "p0_learning")
        check_recipe(cfg)
        turns_per_iteration = cfg.env.num_envs * cfg.rollout.turns_per_env
        iterations = max(1, math.ceil(args.turns / turns_per_iteration))
        torch.set_num_threads(args.threads)
        tic = time.perf_counter()
        a = VerlogSide(cfg)
        base = Path(base_model_path(cfg))
        try:
            for _ in range(iterations):
                row = a.iteration()
                curves["verlog"].append({"iteration": row["iteration"], "turns": row["turns"],
                                         "success": row["episode/success"], "return": row["episode/return"],
                                         "episodes": row["episodes"]})
                print(f"verlog  it {row['iteration']:3d} turns {row['turns']:6d} success {row['episode/success']:.3f} "
                      f"return {row['episode/return']:+.3f} ({row['seconds']:.1f} s)", flush=True)
        finally:
            a.close()
        seconds_a = time.perf_counter() - tic
        tic = time.perf_counter()
        b = MinimalPPO(loop_config(cfg), base)  # the tiny model itself: the loop runs its own warm-up
        torch.set_num_threads(args.threads)
        nll = b.format_warmup() if b.cfg.warmup_steps else []
        if nll:
            print(f"minimal format warm-up: {len(nll)} steps, target NLL {nll[0]:.3f} -> {nll[-1]:.3f}", flush=True)
        try:
            turns = 0
            for _ in range(iterations):
                row = b.iteration()
                turns += row["turns"]
                curves["minimal"].append({"iteration": row["iteration"], "turns": turns, "success": row["success"],
                                          "return": row["return"], "episodes": row["episodes"]})
                print(f"minimal it {row['iteration']:3d} turns {turns:6d} success {row['success']:.3f} "
                      f"return {row['return']:+.3f} ({row['seconds']:.1f} s)", flush=True)
        finally:
            b.close()
        seconds_b = time.perf_counter() - tic

    def last(name: str, key: str, k: int = 5) -> float:
        vals = [r[key] for r in curves[name][-k:] if not math.isnan(r[key])]
        return statistics.fmean(vals) if vals else math.nan

    summary = {"turns": iterations * turns_per_iteration, "iterations": iterations, "threads": args.threads,
               "load": [round(x, 2) for x in os.getloadavg()],
               "seconds": {"verlog": round(seconds_a, 1), "minimal": round(seconds_b, 1)},
               "final_success_last5": {k: last(k, "success") for k in curves},
               "final_return_last5": {k: last(k, "return") for k in curves}, "curves": curves}
    (out_dir / "p0_learning.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot = Path(args.plot) if args.plot else out_dir / "p0_learning.png"
    plot_curves(curves, plot, f"{cfg.env.task}: Verlog tiny recipe vs minimal loop ({args.threads} thread(s))")
    print(f"learning at equal turns ({iterations} iterations, {iterations * turns_per_iteration} turns each): success "
          f"of the last 5 iterations Verlog {summary['final_success_last5']['verlog']:.3f}, minimal loop "
          f"{summary['final_success_last5']['minimal']:.3f}; return Verlog "
          f"{summary['final_return_last5']['verlog']:+.3f}, minimal loop "
          f"{summary['final_return_last5']['minimal']:+.3f}; "
          f"wall-clock Verlog {seconds_a:.0f} s, minimal loop {seconds_b:.0f} s (warm-ups included); "
          f"{threads_note(args.threads)}; {load_note()}")
    print(f"curves: {out_dir / 'p0_learning.json'}, plot: {plot}")
    return 0


def plot_curves(curves: dict[str, list[dict[str, float]]], path: Path, title: str) -> None:
    """Success rate and mean episode return per iteration against turns, one line per side, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in curves.items():
        turns = [r["turns"] for r in rows]
        axes[0].plot(turns, [r["success"] for r in rows], label=name)
        axes[1].plot(turns, [r["return"] for r in rows], label=name)
    for ax, what in zip(axes, ("success rate of the episodes ended", "mean episode return")):
        ax.set_xlabel("turns")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=1, help="iterations per timed call of each side (default 1)")
    add_common_args(p)
    p.add_argument("--quick", action="store_true",
                   help="smallest run: 4 envs x 4 turns, 1 epoch x 2 minibatches, no format warm-up")
    p.add_argument("--learning", action="store_true",
                   help="instead of timing: train both for --turns turns and compare their learning curves")
    p.add_argument("--turns", type=int, default=15_360, help="--learning: turns each side trains (default 15,360)")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_minimal_loop"),
                   help="--learning: directory of the curves' JSON and the plot (default runs/bench_minimal_loop)")
    p.add_argument("--plot", default=None, help="--learning: the PNG plot's path (default <--out>/p0_learning.png)")
    p.add_argument("overrides", nargs="*", help="more tiny-recipe overrides, key=value (both sides)")
    args = p.parse_args(argv)
    if args.quick:
        args.pairs = min(args.pairs, 2)
    return learning(args) if args.learning else throughput(args)


if __name__ == "__main__":
    sys.exit(main())
