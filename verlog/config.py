"""Typed run configuration: dataclasses with a doc per field, YAML recipes, ``key=value`` overrides.

A recipe is a YAML file (``recipes/<name>.yaml``) whose keys mirror :class:`TrainConfig`;
command-line overrides use dotted keys (``ppo.actor_lr=3e-4``). Unknown keys and ill-typed
values raise :class:`ConfigError` with one line naming the key. Validation of values
(ranges, choices, divisibility) happens in :func:`validate`, by the rules of :mod:`verlog.config_validate`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, get_type_hints

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verlog.catalog import ENV_TASKS, MIXTURE_TASKS, TIDY_TEXT_FAMILIES
from verlog.config_validate import first_problem

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


class ConfigError(ValueError):
    """A recipe or override is malformed; the message is one line naming the key."""


def _f(default: Any, doc: str, **kw: Any) -> Any:
    """A dataclass field carrying its documentation in ``metadata['doc']``."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc}, **kw)
    return field(default=default, metadata={"doc": doc}, **kw)


def scheduled(value: float, schedule: Dict[int, float], iteration: int) -> float:
    """The value in force at ``iteration`` (1-based): ``value``, or that of the latest ``schedule`` entry at or
    before ``iteration``."""
    started = [it for it in schedule if it <= iteration]
    return schedule[max(started)] if started else value


def _sub(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc})


@dataclass
class TinyModelConfig:
    """Shape of the tiny Qwen2-architecture model built offline for CPU runs."""

    seed: int = _f(0, "seed of the tiny model's weights and tokenizer")
    vocab_size: int = _f(1024, "BPE vocabulary size of the tiny tokenizer")
    hidden_size: int = _f(128, "hidden size (head_dim = hidden_size / num_heads)")
    num_layers: int = _f(2, "transformer layers")
    num_heads: int = _f(2, "attention heads")
    num_kv_heads: int = _f(1, "key/value heads (grouped-query attention)")
    intermediate_size: int = _f(256, "MLP width")
    corpus_episodes: int = _f(64, "random-play episodes whose text trains the tiny tokenizer")
    vision: bool = _f(False, "build the tiny vision-language model (Qwen2.5-VL architecture: a vision tower of "
                             "vision_depth blocks before the language model above) instead of the text one")
    vision_depth: int = _f(2, "vision: vision transformer blocks")
    vision_hidden_size: int = _f(32, "vision: width of the vision blocks")
    vision_heads: int = _f(2, "vision: attention heads of the vision blocks")
    patch_size: int = _f(4, "vision: pixels per side of an image patch (2x2 patches make one image token)")


@dataclass
class ModelConfig:
    """Which weights the actor and critic start from."""

    path: str = _f("tiny", "the actor's weights: 'tiny' (builds the tiny CPU model), a local model directory, a "
                           ".gguf file or a packaged model name such as smollm2-135m-instruct (converted once into "
                           "cache_dir), or a Hugging Face hub id org/name")
    critic_path: Optional[str] = _f(None, "critic backbone, any source path accepts but 'tiny' (default: same as "
                                          "path); a saved critic keeps its head")
    dtype: str = _f("float32", "parameter dtype: float32 or bfloat16")
    value_head_init_std: float = _f(0.0, "std of the fresh value head's init (0 = zeros)")
    cache_dir: str = _f(".cache/verlog", "where built tiny models and models converted from GGUF files are cached")
    lora_rank: int = _f(0, "LoRA rank r of the actor's and critic's adapters (0: train all weights)")
    lora_alpha: float = _f(32.0, "LoRA alpha (the adapter's scale is alpha / r)")
    lora_dropout: float = _f(0.0, "dropout on the LoRA adapters' input")
    lora_target_modules: List[str] = _f(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                                        "linear layers that get adapters")
    lora_modules_to_save: List[str] = _f([], "modules trained in full beside the adapters and saved with them (peft "
                                             "modules_to_save; a name matches every module ending in it, e.g. norm)")
    trainable_layers: Optional[int] = _f(None, "train only the top k transformer layers (+ final norm, + the critic's "
                                         "value head); lower layers, embeddings and the tied LM head are frozen and "
                                         "run without autograd; with LoRA, adapters go on the top k layers only "
                                         "(None: all)")
    cache_frozen_activations: bool = _f(False, "with trainable_layers: compute the frozen layers' output for each "
                                        "turn once per iteration (shared by actor and critic when their frozen "
                                        "layers are equal) and run only the top layers in scoring and the update "
                                        "epochs; costs turns x tokens x hidden floats of memory")
    freeze_vision: bool = _f(False, "vision-language models: keep the vision tower's weights fixed (it still runs in "
                                    "scoring and the update; no gradient, no optimizer state)")
    tiny: TinyModelConfig = _sub(TinyModelConfig, "tiny model shape (used when path = 'tiny')")


@dataclass
class EnvConfig:
    """The training environments."""

    task: str = _f("babyai/easy_goto", "registered text environment, e.g. babyai/goto, a plugin family's task, or "
                   "an import path package.module:Name of a TextEnv subclass or factory")
    kwargs: Dict[str, Any] = _f(
        {}, "extra keyword arguments of the environment's factory, e.g. a plugin game's own settings "
        "({size: 5}); keys that other env.* keys set are refused")
    task_weights: Dict[str, float] = _f(
        {}, "task mixtures (babyai/balrog_mix): sampling weight per task name, e.g. {babyai/open: 2}; tasks not "
        "named weigh 1, weight 0 leaves a task out ({}: all equal)")
    num_envs: int = _f(16, "parallel environments N (per data-parallel rank)")
    vector_mode: str = _f("async", "gymnasium vector env: async (subprocesses) or sync")
    format_penalty: float = _f(-0.1, "added to the reward of a step whose reply was not a valid action")
    max_steps: Optional[int] = _f(None, "episode step limit (None: BALROG's limit for the task)")
    instruction_style: str = _f("full", "system prompt: full (BALROG's) or brief (mission + actions; for tiny models); "
                                "Verlog's own environments only (one from outside writes its own prompt)")
    text_style: str = _f("balrog", "observation text: balrog (byte for byte what BALROG's wrapper writes, its quirks "
                         "included) or tidy (Verlog's own wording; babyai/*, crafter/*, minihack/*, nle/* and textworld/* "
                         "have it, other environments have BALROG's text only and ignore the key)")
    observation_mode: str = _f("text", "what an observation is: text (a str, the default), image (the mission as text "
                               "and an RGB image of what the agent sees) or both (the text and the image); "
                               "image modes need memory.type=vision and a vision-language model; babyai/* only")
    image_tile_px: int = _f(8, "image modes: pixels per grid cell of the image (BabyAI's 7x7 view: 7 x this, square)")
    step_timeout_s: Optional[float] = _f(
        60.0, "seconds one env step/reset may take; a slower env is treated as hung, restarted and its "
        "episode truncated (None: no limit)")
    restart_attempts: int = _f(3, "rebuilds in a row of a faulty env (raised, hung, dead worker) before the run stops")
    distance_shaping: float = _f(
        0.0, "training envs only, BabyAI tasks: beta of potential-based shaping (Ng et al. 1999), each step adds "
        "gamma*Phi(s')-Phi(s) (gamma: env.shaping_gamma) with Phi = -beta * the grid distance the mission still "
        "needs the agent to walk (through its stages: key before locked door, object before its destination; "
        "reward per cell; 0: off)")
    shaping_gamma: Optional[float] = _f(
        None, "the gamma of distance_shaping's term gamma*Phi(s')-Phi(s) (None: gae.gamma_step, which leaves the "
        "optimal policies unchanged; 1.0: the plain change of distance, which pays nothing for standing still, "
        "where gamma<1 pays (1-gamma)*beta*distance per step that changes nothing)")
    revisit_penalty: float = _f(
        0.0, "training envs only, BabyAI tasks: reward taken from each step that returns the level to a state it "
        "was in earlier in the episode (a no-op action, a full turn on the spot, walking back), so that loops a "
        "greedy policy would repeat cost return; shortest paths never revisit, so the task's optimal policies "
        "stay optimal (0: off)")
    revisit_penalty_schedule: Dict[int, float] = _f(
        {}, "later revisit costs: iteration -> the revisit_penalty in force from that iteration on (1-based, as "
        "metrics.jsonl counts), e.g. {401: 0.25}; {}: revisit_penalty throughout. Set at the start of each "
        "iteration on every training env (restarted ones included; a cost switched on mid-episode counts "
        "revisits from there). A higher cost late in a run presses on the near-tied actions that make a greedy "
        "policy loop; BabyAI tasks only")

    def revisit_penalty_at(self, iteration: int) -> float:
        """The revisit cost in force at ``iteration`` (1-based): ``revisit_penalty``, or the value of the
        latest ``revisit_penalty_schedule`` entry at or before ``iteration``."""
        return scheduled(self.revisit_penalty, self.revisit_penalty_schedule, iteration)

    def env_kwargs(self, *, shaping_gamma: Optional[float] = None) -> dict[str, Any]:
        """Keyword arguments of :func:`verlog.envs.make_env` for this config (defaults left out).

        Args:
            shaping_gamma: for the training envs, the learner's step discount (``gae.gamma_step``):
                given, and with ``distance_shaping`` on, the shaping's arguments are included (with
                ``self.shaping_gamma`` in place of this one when that is set), and ``revisit_penalty``
                when on; otherwise (evaluation) they are not, so evaluation returns are the task's own.
        """
        kwargs: dict[str, Any] = {**self.kwargs, "format_penalty": self.format_penalty}
        if shaping_gamma is not None and self.distance_shaping:
            gamma = shaping_gamma if self.shaping_gamma is None else self.shaping_gamma
            kwargs.update(distance_shaping=self.distance_shaping, shaping_gamma=gamma)
        if shaping_gamma is not None and self.revisit_penalty:
            kwargs["revisit_penalty"] = self.revisit_penalty
        if self.max_steps is not None:
            kwargs["max_steps"] = self.max_steps
        if self.task_weights and self.task in MIXTURE_TASKS:  # an evaluation of one of its tasks has no weights
            kwargs["task_weights"] = dict(self.task_weights)
        if self.instruction_style != "full" and self.task.partition("/")[0] in ENV_TASKS:  # Verlog's own envs
            kwargs["instruction_style"] = self.instruction_style
        if self.text_style != "balrog" and self.task.partition("/")[0] in TIDY_TEXT_FAMILIES:
            kwargs["text_style"] = self.text_style
        if self.observation_mode != "text":
            kwargs.update(observation_mode=self.observation_mode, image_tile_px=self.image_tile_px)
        return kwargs


@dataclass
class AgentConfig:
    """Where conversations come from: text environments (default), or a tool task run by the built-in
    tool-calling loop or by an OpenAI-client agent through the proxy (``verlog/agent``, ``verlog/proxy``).
    With ``tools``/``proxy``, ``env.num_envs`` conversations run per iteration (``env.task`` unused)."""

    loop: str = _f("env", "env: text environments; tools: the built-in tool-calling loop on agent.task; proxy: "
                          "the agent function agent.agent talking to an OpenAI-compatible proxy")
    task: str = _f("calculator", "tool task of loop tools/proxy (calculator, search); loop tools: an environment class "
                                 "package.module:Class in TRL's convention; loop proxy: a row function "
                                 "package.module:rows whose rows the agent plays (docs/agents.md)")
    dataset: Optional[str] = _f(None, "agent.task a class: its rows, package.module:name of a function (n, seed) -> "
                                      "rows or a list of rows, each a dict with a prompt; None: reset() writes "
                                      "the prompt")
    agent: str = _f("verlog.agent.calculator_openai:solve", "loop proxy: the agent, 'module:function' called as "
                    "function(item, base_url=, reward_url=, temperature=, max_tokens=)")
    max_operand: int = _f(99, "calculator: operands are integers 2..max_operand")
    top_k: int = _f(2, "search: passages each search call returns (the proxy agent "
                       "verlog.agent.search_openai:solve uses 2)")
    warmup_worlds: int = _f(0, "search: the format warm-up's questions come from this many other invented "
                               "worlds (none naming a held-out entity), so it sees many more names than the "
                               "task's 200 training entities; 0: the task's own training questions")
    query_space: bool = _f(False, "search: the format warm-up writes each query with the space that precedes the "
                                  "name where it is copied from, so a byte-level BPE splits it into the same "
                                  "tokens (for the tiny model)")
    max_assistant_turns: int = _f(3, "loop tools: most assistant turns per conversation")
    max_total_tokens: int = _f(1024, "loop tools: most tokens per conversation (first prompt included)")
    max_tool_response_chars: int = _f(500, "loop tools: longer tool responses are cut (and the cut counted)")
    credit: str = _f("gae", "loop proxy: the reward over a rollout's calls: gae (on the last call; GAE and the "
                            "critic spread it), final (on every call) or discounted")
    credit_gamma: float = _f(1.0, "loop proxy, credit discounted: the discount per call")
    tool_latency_s: float = _f(0.0, "loop tools: seconds every tool call waits before it runs (an injected latency, "
                                    "as of a remote tool; for benchmarks and tests)")

    def task_kwargs(self) -> dict[str, Any]:
        """The keys of the built-in task ``task`` (calculator: ``max_operand``; search: ``top_k``,
        ``warmup_worlds``, ``query_space``), for :func:`verlog.agent.tasks.make_agent_task`; empty for any other task."""
        return {"calculator": {"max_operand": self.max_operand},
                "search": {"top_k": self.top_k, "warmup_worlds": self.warmup_worlds,
                           "query_space": self.query_space}}.get(self.task, {})


@dataclass
class MemoryConfig:
    """How each turn's prompt is built (docs/memory.md)."""

    type: str = _f("window", "which memory builds the prompts: none (instruction + current observation), window (plus "
                             "the last history_turns turns), full (plus every turn of the episode, trimmed to the budget "
                             "like window), summary (plus a bounded record: the last summary_turns turns as one line "
                             "each, counts of older ones, the env's key events), or a user's class as "
                             "module.path:ClassName implementing verlog.memory.Memory")
    history_turns: int = _f(1, "window: previous (observation, reply) turns shown before the current observation")
    max_prompt_tokens: int = _f(1024, "prompt token budget of every built-in memory type; oldest history is dropped "
                                      "first, then the current observation is cut")
    max_images: int = _f(1, "vision: most images shown in one prompt, the newest first (older turns keep their "
                            "text; each left out is counted in prompt/dropped_images)")
    summary_turns: int = _f(16, "summary: the latest turns shown as one line each (older turns are counted), and the "
                                "latest key events shown")
    reply_hint: Optional[str] = _f(None, "text appended to the current observation (e.g. a format reminder)")
    reply_prefix: Optional[str] = _f(None, "text the assistant's reply starts with, placed in the prompt after the "
                                           "generation header (e.g. ACTION:); the model writes the rest; the env and "
                                           "the history see prefix + completion; None: off")


@dataclass
class RolloutConfig:
    """Generation during training."""

    engine: str = _f("hf", "rollout backend: hf (transformers) or vllm")
    turns_per_env: int = _f(8, "T: turns collected per environment per iteration (batch = T x N turns)")
    max_response_tokens: int = _f(32, "most tokens per reply")
    temperature: float = _f(1.0, "sampling temperature; the policy trained is the one sampled, softmax(logits / "
                                 "temperature): old, new and reference logprobs are all taken at it (0: greedy "
                                 "rollouts, scored at 1)")
    temperature_schedule: Dict[int, float] = _f(
        {}, "later sampling temperatures: iteration -> the temperature in force from that iteration on (1-based, as "
        "metrics.jsonl counts), e.g. {200: 0.5}; {}: temperature throughout. Lowering it late trains the policy "
        "that greedy decoding approaches, so loops that sampling escaped by chance cost return")
    top_p: float = _f(1.0, "nucleus sampling mass")
    top_k: int = _f(-1, "top-k sampling (-1: off)")
    vllm_gpu_memory_utilization: float = _f(0.5, "vLLM: fraction of GPU memory for weights + KV cache")
    vllm_tensor_parallel_size: int = _f(1, "vLLM: tensor-parallel size")
    vllm_cpu_kv_cache_gb: float = _f(0.0, "vLLM on CPU: KV cache size in GiB (0: sized when the engine starts, a tenth "
                                          "of the memory then available, at most 1 GiB, at least 64 MiB)")
    max_staleness: int = _f(0, "policy versions a trained token may lag behind: 0 collects, then updates (synchronous); "
                                "1 collects the next batch while this one is scored and trained, so the engine "
                                "generates with the weights of one update before (the decoupled PPO objective "
                                "corrects, ppo.behaviour_weight_cap)")
    vllm_sleep_between_updates: bool = _f(False, "vLLM: sleep mode (level 1) during each update: KV cache freed, weights "
                                                 "offloaded to host memory; CUDA/ROCm/XPU only, not yet run on a GPU")
    server: bool = _f(False, "generate through an engine server (verlog/rollout/server.py): the engine in its own thread, "
                             "each request batched with whatever others wait (grouped by sampling parameters), "
                             "requests paused and drained around weight loads; agent.loop tools: the conversations' "
                             "turns are requests; text envs: each turn's prompts are requests (lock-step as before)")
    server_max_batch: int = _f(64, "rollout.server: most prompts per engine call")

    def temperature_at(self, iteration: int) -> float:
        """The sampling temperature in force at ``iteration`` (1-based): ``temperature``, or the value of the
        latest ``temperature_schedule`` entry at or before ``iteration``."""
        return scheduled(self.temperature, self.temperature_schedule, iteration)

    def policy_temperature_at(self, iteration: int) -> float:
        """The temperature the trained policy's logprobs are taken at in ``iteration``: the sampling
        temperature, or 1 where that is 0 (greedy rollouts have no tempered distribution)."""
        return self.temperature_at(iteration) or 1.0


@dataclass
class GAEConfig:
    """Dual-discount GAE: separate discounts and lambdas across steps and across the tokens of a turn."""

    gamma_step: float = _f(0.99, "discount across environment steps")
    gamma_step_schedule: Dict[int, float] = _f(
        {}, "later step discounts: iteration -> the gamma_step in force from that iteration on (1-based, as "
        "metrics.jsonl counts), e.g. {80: 0.8}; {}: gamma_step throughout. A shorter discount late in a run makes a "
        "step that changes nothing dearer, so near-tied actions separate and greedy decoding stops looping")
    lam_step: float = _f(0.95, "GAE lambda across environment steps")
    gamma_token: float = _f(1.0, "discount across the tokens of a turn")
    lam_token: float = _f(1.0, "GAE lambda across the tokens of a turn")
    whiten_advantages: bool = _f(True, "whiten advantages over the valid tokens of the batch")

    def gamma_step_at(self, iteration: int) -> float:
        """The step discount in force at ``iteration`` (1-based): ``gamma_step``, or the value of the latest
        ``gamma_step_schedule`` entry at or before ``iteration``."""
        return scheduled(self.gamma_step, self.gamma_step_schedule, iteration)


@dataclass
class AlgoConfig:
    """Which advantage estimator and policy-loss variant (verlog/algos/estimators.py, losses.py)."""

    algorithm: str = _f(
        "ppo",
        "ppo: critic + dual-discount GAE; grpo, gigpo, rloo, reinforce_pp, reinforce_pp_baseline: critic-free "
        "estimators; dapo: grpo advantages + dynamic sampling + token-mean (+ overlong penalty if on; clip-higher "
        "via ppo.clip_high); gspo: grpo advantages + the GSPO sequence-ratio loss (clip range from ppo.clip_low/high)",
    )
    group_size: int = _f(1, "episodes per group (same task/seed); group algorithms need >= 2 and divide env.num_envs")
    norm: str = _f("mean_std", "group normalisation of grpo/gigpo/dapo/gspo: mean_std ((R - mean) / (std + eps)) or mean")
    std_eps: float = _f(1e-6, "eps added to the group std (norm = mean_std)")
    gigpo_omega: float = _f(1.0, "GiGPO: weight of the step-level (anchor-state) advantage")
    gigpo_gamma: float = _f(0.95, "GiGPO: discount of the per-turn step returns")
    reinforce_pp_gamma: float = _f(1.0, "REINFORCE++: discount of the per-turn returns before batch whitening")
    loss_aggregation: str = _f(
        "token-mean", "policy-loss aggregation: token-mean, seq-mean-token-mean or seq-mean-token-sum (gspo: seq-mean-token-mean)"
    )
    dynamic_sampling: bool = _f(False, "DAPO: drop groups whose episode returns are all equal (no learning signal)")
    max_refills: int = _f(3, "DAPO dynamic sampling: extra rounds collected per iteration at most, to replace dropped groups")
    overlong_penalty: bool = _f(False, "DAPO soft overlong penalty on a turn's reward by its response length")
    overlong_cache_tokens: int = _f(8, "DAPO L_cache: the penalty ramps from 0 to -factor over the last L_cache of rollout.max_response_tokens")
    overlong_penalty_factor: float = _f(1.0, "DAPO: size of the overlong penalty at full length")


@dataclass
class PPOConfig:
    """The PPO update."""

    actor_lr: float = _f(1e-6, "actor learning rate (AdamW)")
    actor_lr_schedule: Dict[int, float] = _f(
        {}, "later actor learning rates: iteration -> the actor_lr in force from that iteration on (1-based, as "
        "metrics.jsonl counts), e.g. {441: 3e-4}; {}: actor_lr throughout. Sampling at temperature T moves "
        "log pi_T 1/T times as far per parameter step, so a lower rollout temperature late may want a "
        "smaller rate")
    critic_lr: float = _f(1e-5, "critic learning rate (AdamW)")
    weight_decay: float = _f(0.0, "AdamW weight decay for actor and critic")
    epochs: int = _f(1, "passes over each batch")
    minibatches: int = _f(2, "optimizer steps per epoch (the batch is split into this many minibatches)")
    micro_batch_size: int = _f(16, "turns per forward/backward pass (gradient accumulation inside a minibatch)")
    micro_batch_tokens: int = _f(0, "token budget per forward/backward pass instead: length-sorted rows, rows x "
                                 "longest row <= this (0: micro_batch_size rows)")
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass (less memory, ~30% more time)")
    clip_low: float = _f(0.2, "ratio clip below: 1 - clip_low")
    clip_high: float = _f(0.2, "ratio clip above: 1 + clip_high (asymmetric 'clip-higher' when > clip_low)")
    dual_clip: Optional[float] = _f(3.0, "dual-clip constant c > 1 for negative advantages (None: off)")
    value_clip: Optional[float] = _f(0.2, "value-loss clip around the rollout values (None: off)")
    value_coef: float = _f(1.0, "weight of the value loss in the critic's objective")
    entropy_coef: float = _f(0.0, "entropy bonus weight")
    kl_coef: float = _f(0.0, "KL to the reference policy; the reference is loaded only when > 0 (here or in "
                             "kl_coef_schedule)")
    kl_coef_schedule: Dict[int, float] = _f(
        {}, "later KL weights: iteration -> the kl_coef in force from that iteration on (1-based, as metrics.jsonl "
        "counts), e.g. {300: 0.01}; {}: kl_coef throughout. A KL to a near-uniform reference keeps the policy "
        "spread; a smaller weight late lets it settle on the actions greedy decoding will take")
    kl_kind: str = _f("k3", "KL estimator: k1, k2 or k3")
    kl_in_reward: bool = _f(False, "apply the KL as a per-token reward penalty instead of a loss term")
    max_grad_norm: float = _f(1.0, "gradient clipping (global norm)")
    target_kl: Optional[float] = _f(None, "stop the update's remaining minibatches when approx-KL exceeds this")
    max_skipped_steps: int = _f(10, "stop the run, after writing a checkpoint, when more than this many optimizer "
                                "steps in a row of one engine (actor or critic) were skipped for a non-finite "
                                "loss or gradient norm; every skip is counted in update/skipped_steps")
    critic_warmup_iterations: int = _f(0, "value-only iterations on rollouts of the untrained policy before the first policy update")
    behaviour_weight_cap: float = _f(5.0, "rollout.max_staleness=1: cap of the importance weight pi_prox / pi_behaviour "
                                          "that scales each stale token's advantage (decoupled PPO objective)")

    def actor_lr_at(self, iteration: int) -> float:
        """The actor learning rate in force at ``iteration`` (1-based): ``actor_lr``, or the value of the
        latest ``actor_lr_schedule`` entry at or before ``iteration``."""
        return scheduled(self.actor_lr, self.actor_lr_schedule, iteration)

    def kl_coef_at(self, iteration: int) -> float:
        """The KL weight in force at ``iteration`` (1-based): ``kl_coef``, or the value of the latest
        ``kl_coef_schedule`` entry at or before ``iteration``."""
        return scheduled(self.kl_coef, self.kl_coef_schedule, iteration)

    @property
    def uses_reference(self) -> bool:
        """Whether any iteration weighs a KL to the reference policy (which must then be loaded)."""
        return self.kl_coef > 0 or any(v > 0 for v in self.kl_coef_schedule.values())


@dataclass
class FormatWarmupConfig:
    """Brief supervised warm-up that teaches the reply format only (``ACTION: <random valid action>``)."""

    steps: int = _f(0, "supervised steps (0: off)")
    batch_size: int = _f(32, "prompts per step")
    lr: float = _f(1e-3, "learning rate")
    episodes: int = _f(32, "random-play episodes whose prompts are used")
    prompt_lm_weight: float = _f(
        0.0, "weight of a next-token loss on the prompt's own tokens (instruction and observations) added to the "
        "reply loss: self-supervised reading of the env's text, so that the reply position does not learn to ignore "
        "the observation (random replies alone teach it to); 0: reply tokens only")


@dataclass
class DeepSpeedConfig:
    """DeepSpeed engine settings for actor and critic."""

    zero_stage: int = _f(2, "ZeRO stage 0-3")
    bf16: bool = _f(False, "bf16 mixed precision")
    offload_optimizer: str = _f("none", "ZeRO-Offload: none, or cpu to keep the optimizer states in host memory "
                                        "and run the optimizer step there (needs zero_stage >= 1; saves GPU "
                                        "memory; runs on a CPU-only machine but gains nothing there; not yet run on a GPU)")
    offload_param: str = _f("none", "ZeRO-3 parameter offload: none, or cpu to keep the parameters in host "
                                    "memory between uses (needs zero_stage 3; as offload_optimizer, only run on CPU)")


@dataclass
class EvalConfig:
    """Fixed-seed evaluation."""

    episodes: int = _f(100, "episodes per evaluation")
    seed: int = _f(100_000, "seed of the first evaluation episode (episode i uses seed + i)")
    num_envs: int = _f(16, "parallel evaluation environments")
    greedy: bool = _f(True, "argmax decoding (False: sample at the temperature the policy was last trained at, "
                            "rollout.temperature or its schedule's entry in force)")
    every: int = _f(0, "evaluate every k iterations during training (0: only at the end)")
    baseline: bool = _f(True, "also evaluate the untrained policy (greedy and sampled) before training")


@dataclass
class LoggingConfig:
    """Where metrics go."""

    wandb: bool = _f(False, "log to Weights & Biases")
    wandb_mode: str = _f("offline", "wandb mode: offline or online")
    wandb_project: str = _f("verlog", "wandb project")
    progress: bool = _f(True, "show a progress bar: the phase, iterations, turns/s, recent success, evaluation episodes")
    tensorboard: bool = _f(False, "also write the metrics as TensorBoard scalars to <run_dir>/tensorboard/ "
                                  "(step = iteration)")
    dump_batch_every: int = _f(0, "save the scored batch every k iterations (0: never)")


@dataclass
class TrainConfig:
    """One training run."""

    name: str = _f("run", "run name: outputs go to <run_root>/<name>/ (one path component: no '/', '..' or "
                          "absolute path)")
    run_root: str = _f("runs", "parent directory of run directories")
    overwrite: bool = _f(False, "replace an existing <run_root>/<name>/ (deleted first); without it a name already "
                                "holding a run is refused. Ignored with resume, which continues the run")
    seed: int = _f(0, "seed of everything (python, numpy, torch, envs)")
    iterations: int = _f(100, "PPO iterations (critic warm-up iterations included)")
    threads: int = _f(1, "torch intra-op threads per process")
    gpus_per_node: int = _f(0, "CUDA GPUs the recipe needs on each node (0: runs on the CPU); with fewer, the run "
                            "stops at once with one line")
    turn_budget: int = _f(0, "stop after the iteration in which the run's total turns (all ranks) reach this (0: off)")
    checkpoint_every: int = _f(0, "write a checkpoint every k iterations (0: only at the end)")
    checkpoint_keep: int = _f(0, "keep only the newest k checkpoints, older ones deleted after a new one is complete "
                                 "(0: keep all)")
    resume: Optional[str] = _f(None, "run directory to resume from (its newest checkpoint)")
    model: ModelConfig = _sub(ModelConfig, "actor/critic weights")
    env: EnvConfig = _sub(EnvConfig, "environments")
    agent: AgentConfig = _sub(AgentConfig, "tool tasks: the built-in loop or an agent through the proxy")
    memory: MemoryConfig = _sub(MemoryConfig, "prompt memory")
    rollout: RolloutConfig = _sub(RolloutConfig, "generation")
    gae: GAEConfig = _sub(GAEConfig, "advantage estimation")
    algo: AlgoConfig = _sub(AlgoConfig, "advantage estimator and loss variant")
    ppo: PPOConfig = _sub(PPOConfig, "PPO update")
    format_warmup: FormatWarmupConfig = _sub(FormatWarmupConfig, "format warm-up")
    deepspeed: DeepSpeedConfig = _sub(DeepSpeedConfig, "DeepSpeed")
    eval: EvalConfig = _sub(EvalConfig, "evaluation")
    logging: LoggingConfig = _sub(LoggingConfig, "metric sinks")


def validate(cfg: TrainConfig) -> TrainConfig:
    """Check value ranges, choices and cross-field rules (:mod:`verlog.config_validate`).

    Names that must exist elsewhere (a registered environment, a known tool task, ...) are checked
    by :func:`verlog.preflight.check_buildable`.

    Raises:
        ConfigError: one line naming the first offending key.
    """
    problem = first_problem(cfg)
    if problem is not None:
        raise ConfigError(problem)
    return cfg


def _one_line(err: OmegaConfBaseException) -> str:
    key = getattr(err, "full_key", None) or "?"
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{key}: {msg}"


def resolve_recipe(recipe: str) -> Path:
    """Map a recipe name (``tiny``) or a YAML path to a file.

    Raises:
        ConfigError: the recipe does not exist.
    """
    path = Path(recipe)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"recipe: file not found: {recipe}")
        return path
    candidate = RECIPES_DIR / f"{recipe}.yaml"
    if not candidate.is_file():
        known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
        raise ConfigError(f"recipe: unknown recipe {recipe!r} (known: {known})")
    return candidate


#: short override names: ``algorithm=grpo`` is ``algo.algorithm=grpo``
ALIASES = {"algorithm": "algo.algorithm"}


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into ``{"a.b": 1, "c": "x"}`` (values parsed as YAML scalars).

    Text that YAML would read as a block mapping stays text: ``memory.reply_prefix=ACTION:`` gives
    ``"ACTION:"``.

    Short names in :data:`ALIASES` are expanded (``algorithm=grpo`` -> ``algo.algorithm``).

    Raises:
        ConfigError: an item is not of the form ``key=value``; a mapping written without a space after a
            colon (``{201:0.5}``, which YAML reads as one key, the base-60 number 12060.5, with no value).

    A key given twice takes its last value, as in OmegaConf's dotlists (a script may append overrides
    to a user's).
    """
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = ALIASES.get(key.strip(), key.strip())
        if not sep or not key or any(not part.isidentifier() for part in key.split(".")):
            raise ConfigError(f"{item}: expected an override of the form key=value (e.g. ppo.actor_lr=1e-5)")
        if raw.strip() in ("None", "none", "null", "~", ""):
            out[key] = None
            continue
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        # A leaf's text that YAML reads as a block mapping ("ACTION:", "Action: go") is that text;
        # a mapping written as one ("{history_turns: 2}") stays a mapping.
        mapping = isinstance(value, dict) and raw.lstrip().startswith("{")
        if mapping and None in value.values() and re.search(r"[^\s{,]:[^\s]", raw):
            raise ConfigError(f"{key}: write a mapping with a space after each colon, e.g. {{201: 0.5}}; "
                              f"got {raw.strip()!r}")
        out[key] = value if mapping or not isinstance(value, dict) else raw
    return out


def _section_types(cls: type) -> dict[str, Any]:
    """Field name -> its dataclass type for the sections of ``cls``, None for its leaves."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] if dataclasses.is_dataclass(hints[f.name]) else None
            for f in dataclasses.fields(cls)}


def _unknown_key(dotted: str, name: str, fields: dict[str, Any]) -> ConfigError:
    close = difflib.get_close_matches(name, list(fields), n=1)
    hint = f"; did you mean {dotted[:len(dotted) - len(name)]}{close[0]}?" if close else ""
    return ConfigError(f"{dotted}: unknown key{hint}")


def _check_shape(data: Any, cls: type, prefix: str) -> None:
    """Every key of a recipe mapping is a field of ``cls`` and every section gets a mapping.

    Raises:
        ConfigError: ``<key>: unknown key`` (with the closest field) or ``<key>: expected a section``.
    """
    fields = _section_types(cls)
    for name, value in data.items():
        dotted = f"{prefix}{name}"
        if not isinstance(name, str) or name not in fields:
            raise _unknown_key(dotted, str(name), fields)
        section = fields[name]
        if section is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"{dotted}: expected a section (a mapping of its keys, e.g. {dotted}.<key>), "
                              f"got {value!r}")
        _check_shape(value, section, dotted + ".")


def _check_override_key(key: str, value: Any) -> bool:
    """The dotted ``key`` of an override names a field, and a section gets a mapping.

    Returns:
        True when ``key`` names a section (its mapping is merged into the section's keys), False when it
        names a value (a mapping-valued field such as a schedule is replaced whole).

    Raises:
        ConfigError: one line naming the key.
    """
    cls: Any = TrainConfig
    parts = key.split(".")
    for i, name in enumerate(parts):
        fields = _section_types(cls)
        dotted = ".".join(parts[:i + 1])
        if name not in fields:
            raise _unknown_key(dotted, name, fields)
        if fields[name] is None:
            if i < len(parts) - 1:
                raise ConfigError(f"{key}: {dotted} is a value, not a section with keys")
            return False
        cls = fields[name]
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a section (a mapping of its keys, e.g. {key}.<key>=...), got {value!r}")
    _check_shape(value, cls, key + ".")
    return True


def build_config(data: dict[str, Any], overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Merge a recipe mapping and dotted overrides onto the defaults and validate.

    An override of a section (``memory={history_turns: 2}``) sets only the keys it names; an override of
    a value replaces it whole, a mapping-valued one included (``rollout.temperature_schedule={}`` clears
    the recipe's schedule).

    Raises:
        ConfigError: unknown key, wrong type or invalid value (one line naming the key).
    """
    _check_shape(data or {}, TrainConfig, "")
    sections = {key: _check_override_key(key, value) for key, value in (overrides or {}).items()}
    schema = OmegaConf.structured(TrainConfig)
    try:
        merged = OmegaConf.merge(schema, OmegaConf.create(data or {}))
        for key, value in (overrides or {}).items():
            # a section's mapping sets the keys it names; any other value (a schedule too) replaces
            OmegaConf.update(merged, key, value, merge=sections[key], force_add=False)
        if OmegaConf.missing_keys(merged):
            raise ConfigError(f"{sorted(OmegaConf.missing_keys(merged))[0]}: a value is required")
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise ConfigError(_one_line(err)) from None
    assert isinstance(cfg, TrainConfig)
    return validate(cfg)


def _position(mark: Any) -> str:
    """``line L, column C`` (1-based) of a PyYAML mark."""
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_error(err: yaml.YAMLError) -> str:
    """A PyYAML error as one line with its line and column (and those of its context, if any)."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return " ".join(str(err).split())
    where = f"at {_position(err.problem_mark)}: {' '.join(str(err.problem).split())}"
    if err.context:
        context_at = f" at {_position(err.context_mark)}" if err.context_mark is not None else ""
        where += f" ({' '.join(str(err.context).split())}{context_at})"
    return where


def _check_nodes(node: yaml.Node, key: str, on_path: set[int], checked: set[int]) -> None:
    """Refuse duplicate mapping keys and aliases that contain themselves, naming the dotted key.

    Each node is checked once (``checked``), so aliases shared many times cost nothing extra.

    Raises:
        ConfigError: ``<key>: duplicate key (lines A and B)`` or ``<key>: YAML alias ... refers to itself``.
    """
    if id(node) in on_path:
        raise ConfigError(f"{key or 'recipe'}: a YAML alias (at {_position(node.start_mark)}) refers to the "
                          "mapping or list that contains it, which has no finite value")
    if id(node) in checked:
        return
    on_path.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            dotted = f"{key}.{name}" if key else name
            if name in seen and name != "<<":  # "<<" merges a mapping in; it may repeat
                raise ConfigError(f"{dotted}: duplicate key (lines {seen[name] + 1} and "
                                  f"{key_node.start_mark.line + 1}); give each key once")
            seen[name] = key_node.start_mark.line
            _check_nodes(value_node, key if name == "<<" else dotted, on_path, checked)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(item, f"{key}[{i}]", on_path, checked)
    on_path.discard(id(node))
    checked.add(id(node))


def read_recipe_text(text: str, where: str) -> dict[str, Any]:
    """The mapping of a recipe's YAML text.

    Args:
        where: what the text is, for the messages (e.g. ``recipe recipes/tiny.yaml``).

    Raises:
        ConfigError: one line: malformed YAML (with its line and column), nesting deeper than the
            recursion limit, an empty recipe, a top level that is not a mapping, a duplicate key or an alias that contains itself (naming the key).
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: malformed YAML {_yaml_error(err)}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{where}: YAML nested too deeply (more than Python's recursion limit)") from None
    empty_document = isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"  # "---", "null"
    if root is None or empty_document or (isinstance(root, yaml.MappingNode) and not root.value):
        raise ConfigError(f"{where}: empty recipe (no keys); a recipe sets at least one key, e.g. name: my_run")
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{where}: expected a mapping of keys at the top level")
    _check_nodes(root, "", set(), set())
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:  # a value the safe constructor refuses (e.g. an unknown tag)
        raise ConfigError(f"{where}: malformed YAML {_yaml_error(err)}") from None
    return data


def load_recipe(recipe: str, overrides: list[str] | None = None) -> TrainConfig:
    """Load a recipe (name or YAML path) with ``key=value`` overrides into a validated config.

    Raises:
        ConfigError: missing or empty recipe, malformed YAML (line and column), a duplicate key,
            a self-referencing alias, unknown key, wrong type or bad value.
    """
    path = resolve_recipe(recipe)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"recipe {path}: expected UTF-8 YAML text, found undecodable bytes at offset {err.start}") from None
    except OSError as err:
        raise ConfigError(f"recipe {path}: cannot read it ({err.strerror or type(err).__name__})") from None
    data = read_recipe_text(text, f"recipe {path}")
    return build_config(data, parse_overrides(overrides or []))


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain nested dicts (for ``config.yaml`` and checkpoints)."""
    return dataclasses.asdict(cfg)


def save_config(cfg: TrainConfig, path: Path) -> None:
    """Write the resolved config as YAML."""
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def field_docs(cls: type = TrainConfig, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """Every leaf field as ``(dotted key, type name, default, doc)`` — for ``--help``."""
    hints = get_type_hints(cls)  # the annotations are strings here; nested sections resolve to their classes
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            rows.extend(field_docs(hints[f.name], key + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((key, str(f.type), default, f.metadata.get("doc", "")))
    return rows


def section_docs(cls: type = TrainConfig, prefix: str = "") -> dict[str, str]:
    """Every section as ``{dotted key: doc}`` (``model``, ``model.tiny``, ...) in field order — for ``--help``."""
    hints = get_type_hints(cls)
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out[f"{prefix}{f.name}"] = f.metadata.get("doc", "")
            out.update(section_docs(hints[f.name], f"{prefix}{f.name}."))
    return out


__all__ = ["ConfigError", "TrainConfig", "AlgoConfig", "load_recipe", "build_config", "validate", "field_docs",
           "read_recipe_text", "section_docs",
           "save_config", "to_dict", "parse_overrides", "MISSING", "DictConfig"]
