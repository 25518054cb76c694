"""The models a run trains and scores with: the actor and critic DeepSpeed engines and the reference.

The actor is a causal LM; the critic the same network with a scalar value head (for algorithms that
train one); the reference is the initial policy, loaded frozen when a KL term is on (with LoRA the
reference is the actor itself with its adapters disabled, so no second copy is loaded). LoRA adapters
(:mod:`verlog.lora`), gradient checkpointing and ``model.trainable_layers`` (only the top k transformer
layers train, :func:`train_top_layers`) are applied before the engines are made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from verlog import distributed as D
from verlog.config import TrainConfig
from verlog.batch import TurnBatch
from verlog.frozen_base import FROZEN_BELOW, backbone, check_splittable, decoder_layers, share_frozen_base, unwrap
from verlog.lora import add_lora
from verlog.models import load_actor, load_critic
from verlog.safe_load import weights_only_loads
from verlog.scoring import Rows, policy_outputs, turn_rows, with_frozen_hidden
from verlog.vision import vision_tower

__all__ = ["TrainingModels", "build_training_models", "set_optimizer_hyperparameters", "train_top_layers"]


@dataclass
class TrainingModels:
    """The engines of a run.

    Attributes:
        actor: the actor's DeepSpeed engine (``actor.module`` is the Hugging Face model).
        critic: the critic's DeepSpeed engine, or None for algorithms without a critic.
        reference: (rows, temperature) -> the reference policy's logprobs [M, R] at that temperature, or None
            when no KL term is on.
        cache_frozen_activations: the turns' rows get the actor's frozen hidden states before scoring
            (:func:`~verlog.scoring.with_frozen_hidden`); the critic uses them too when its frozen base is
            the actor's.
    """

    actor: Any
    critic: Optional[Any]
    reference: Optional[Callable[[Rows, float], torch.Tensor]]
    cache_frozen_activations: bool = False

    def turn_rows(self, batch: TurnBatch, micro_batch_size: int) -> Rows:
        """The batch's real turns as rows (:func:`~verlog.scoring.turn_rows`), with the actor's frozen
        hidden states when ``cache_frozen_activations`` is on (computed in micro-batches of
        ``micro_batch_size`` rows)."""
        rows = turn_rows(batch)
        return with_frozen_hidden(self.actor, rows, micro_batch_size) if self.cache_frozen_activations else rows

    def engines(self) -> dict[str, Any]:
        """The DeepSpeed engines by checkpoint tag: the actor, and the critic where there is one."""
        return {"actor": self.actor, **({"critic": self.critic} if self.critic is not None else {})}


def train_top_layers(model: torch.nn.Module, k: int) -> None:
    """Freeze every parameter outside the top ``k`` transformer layers, the final norm and the
    critic's value head ``score``; the frozen layers then run under ``torch.no_grad``.

    Trainable parameters are not switched on: with LoRA, what peft leaves trainable inside the
    kept modules (adapters, ``modules_to_save``) stays so. The embeddings and the LM head (tied to
    them or not) are frozen. The frozen layers' forwards record no autograd graph (even when
    gradient checkpointing makes the embeddings' output require grad), so they keep no
    activations and take no backward; their gradient checkpointing is switched off. The model is
    marked with the index of its first trained layer (:data:`~verlog.frozen_base.FROZEN_BELOW`), where
    its frozen hidden states may enter (:mod:`verlog.frozen_base`).

    Args:
        model: a transformers causal LM or token-classification critic, peft-wrapped or not.
        k: 0 <= k <= the number of layers.

    Raises:
        ValueError: ``k`` out of range, or a model without a transformer layer list.
    """
    bb = backbone(model)
    layers = bb.layers
    if not 0 <= k <= len(layers):
        raise ValueError(f"model.trainable_layers: expected 0..{len(layers)} (the model's layers), got {k}")
    base = unwrap(model)
    kept = [*layers[len(layers) - k:], getattr(bb, "norm", None), getattr(base, "score", None)]
    keep = {id(p) for module in kept if module is not None for p in module.parameters()}
    for p in model.parameters():
        if id(p) not in keep:
            p.requires_grad_(False)
    for layer in layers[: len(layers) - k]:
        if hasattr(layer, "gradient_checkpointing"):
            layer.gradient_checkpointing = False
        layer.forward = torch.no_grad()(layer.forward)
    setattr(base, FROZEN_BELOW, len(layers) - k)


def _prepared(model: torch.nn.Module, cfg: TrainConfig, base_path: str | Path, *, critic: bool) -> torch.nn.Module:
    """``model`` ready for its engine: the vision tower frozen with ``model.freeze_vision``, LoRA
    adapters when ``model.lora_rank`` > 0 (on the top ``model.trainable_layers`` layers when set),
    gradient checkpointing when on, and the layers below the top ``model.trainable_layers`` frozen
    (:func:`train_top_layers`).

    Raises:
        ValueError: ``model.freeze_vision`` on a model without a vision tower (one line naming the key).
    """
    m = cfg.model
    k = m.trainable_layers
    if m.freeze_vision:
        tower = vision_tower(model)
        if tower is None:
            raise ValueError("model.freeze_vision: the model has no vision tower")
        tower.requires_grad_(False)
    if m.lora_rank:
        n = len(decoder_layers(model)) if k is not None else 0
        model = add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha, dropout=m.lora_dropout,
                         target_modules=m.lora_target_modules, base_path=base_path, critic=critic,
                         modules_to_save=m.lora_modules_to_save,
                         layers_to_transform=list(range(n - k, n)) if k is not None else None)
    if cfg.ppo.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if k is not None:
        train_top_layers(model, k)
    return model


def set_optimizer_hyperparameters(engine: Any, *, lr: float, weight_decay: float) -> None:
    """Set the learning rate and weight decay of every parameter group of ``engine``'s optimizer.

    ``engine.load_checkpoint`` restores the optimizer's state dict, and with it the hyperparameters
    the checkpoint was written with (``torch.optim.Optimizer.load_state_dict`` copies the saved
    param groups), so a resumed run would otherwise keep the old values whatever its config says.
    The Adam moments and step counts are left as loaded.

    Args:
        engine: a DeepSpeed engine (its ``optimizer`` is the ZeRO wrapper, whose ``param_groups`` are
            the wrapped torch optimizer's).
        lr: the learning rate.
        weight_decay: the AdamW weight decay.
    """
    for group in engine.optimizer.param_groups:
        group["lr"] = lr
        group["weight_decay"] = weight_decay


def build_training_models(cfg: TrainConfig, *, actor_path: str | Path, critic_path: str | Path,
                          initial_path: str | Path, needs_critic: bool, turns_per_batch: int,
                          resume_from: Path | None = None) -> TrainingModels:
    """Load the actor (and critic), wrap them in DeepSpeed engines, and load the reference.

    Args:
        cfg: the run's config (``model``, ``ppo``, ``deepspeed``).
        actor_path, critic_path: where the actor and critic start (the critic's value head is
            initialised with ``model.value_head_init_std`` unless the directory is a critic).
        initial_path: the initial policy (the KL reference).
        needs_critic: whether the algorithm trains a critic.
        turns_per_batch: this rank's turns per iteration (sets DeepSpeed's accumulation steps).
        resume_from: a checkpoint whose DeepSpeed states are loaded into the engines.
    """
    dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
    n_micro = math.ceil(turns_per_batch // cfg.ppo.minibatches / cfg.ppo.micro_batch_size)
    ds = D.ds_config(zero_stage=cfg.deepspeed.zero_stage, micro_batch_size=cfg.ppo.micro_batch_size,
                     grad_accum_steps=n_micro, max_grad_norm=cfg.ppo.max_grad_norm, bf16=cfg.deepspeed.bf16,
                     offload_optimizer=cfg.deepspeed.offload_optimizer, offload_param=cfg.deepspeed.offload_param)

    def engine(model: torch.nn.Module, lr: float) -> Any:
        # the optimizer gets only the trainable parameters (D.make_engine)
        return D.make_engine(model, lr=lr, weight_decay=cfg.ppo.weight_decay, config=ds)

    actor = engine(_prepared(load_actor(actor_path, dtype=dtype), cfg, actor_path, critic=False), cfg.ppo.actor_lr)
    critic = None
    if needs_critic:
        model = load_critic(critic_path, dtype=dtype, value_head_init_std=cfg.model.value_head_init_std)
        critic = engine(_prepared(model, cfg, critic_path, critic=True), cfg.ppo.critic_lr)
    models = TrainingModels(actor, critic, None, cfg.model.cache_frozen_activations)
    if models.cache_frozen_activations:
        check_splittable(actor)
        if critic is not None and not share_frozen_base(actor, critic):
            print("model.cache_frozen_activations: the critic's frozen layers differ from the actor's "
                  "(model.critic_path); the critic runs all its layers", flush=True)
    if resume_from is not None:
        for name, e in models.engines().items():
            # the DeepSpeed state holds no frozen weights (LoRA's base, the layers below the trained
            # top ones): they come from the checkpoint's model directories
            partial = bool(cfg.model.lora_rank) or cfg.model.trainable_layers is not None
            with weights_only_loads(e):  # DeepSpeed's own reader would unpickle anything
                e.load_checkpoint(str(resume_from / "ds"), tag=name, load_module_strict=not partial)
            # the optimizer state brought back the saved run's learning rate and weight decay: a
            # resume with other ppo.* values (``resume=<run> ppo.actor_lr=...``) must step with them
            set_optimizer_hyperparameters(e, lr=cfg.ppo.actor_lr if name == "actor" else cfg.ppo.critic_lr,
                                          weight_decay=cfg.ppo.weight_decay)
    if cfg.ppo.uses_reference:
        models.reference = _reference(cfg, actor, initial_path, dtype)
    return models


def _reference(cfg: TrainConfig, actor: Any, initial_path: str | Path,
               dtype: torch.dtype) -> Callable[[Rows, float], torch.Tensor]:
    """(rows, temperature) -> the reference policy's logprobs at that temperature: the frozen initial policy,
    or with LoRA the actor with its adapters disabled (the base weights). With ``model.cache_frozen_activations`` the frozen
    initial policy runs only its top layers on rows that carry the actor's frozen hidden states, when
    its lower layers are the actor's."""
    if cfg.model.lora_rank:
        def disabled_adapter(rows: Rows, temperature: float) -> torch.Tensor:
            with actor.module.disable_adapter():
                return policy_outputs(actor, rows, temperature=temperature)[0]

        return disabled_adapter
    ref = load_actor(initial_path, dtype=dtype).to(D.device()).eval().requires_grad_(False)
    if cfg.model.cache_frozen_activations:  # its top layers alone run on the actor's frozen hidden states
        train_top_layers(ref, cfg.model.trainable_layers)
        share_frozen_base(actor, ref)
    return lambda rows, temperature: policy_outputs(ref, rows, temperature=temperature)[0]
