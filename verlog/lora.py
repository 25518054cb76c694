"""LoRA adapters (peft) for the actor and the critic.

Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3: a frozen weight
W0 [out, in] is used as W0 + (alpha / r) B A with trainable A [r, in] and B [out, r] (B starts at
zero, so the adapted model starts equal to its base).

* :func:`add_lora` wraps a model (actor, or critic whose value head ``score`` stays fully
  trainable) in a ``peft`` model; only adapter (and head) parameters require gradients.
* The KL reference policy is the same model with its adapter disabled (``disable_adapter()``):
  no second copy of the weights.
* :func:`merged_named_parameters` yields the *merged* weights W0 + (alpha / r) B A under the base
  model's own parameter names, which is what the rollout engines load.
* Checkpoints hold the adapter (``adapter_model.safetensors``, ``adapter_config.json`` naming the
  base directory); :func:`load_adapter_dir` rebuilds the merged model for evaluation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import torch

__all__ = ["add_lora", "merged_named_parameters", "is_adapter_dir", "load_adapter_dir"]

ADAPTER_CONFIG = "adapter_config.json"


def add_lora(model: torch.nn.Module, *, rank: int, alpha: float, dropout: float, target_modules: list[str],
             base_path: str | Path, critic: bool = False, modules_to_save: list[str] | None = None,
             layers_to_transform: list[int] | None = None) -> Any:
    """Wrap ``model`` in LoRA adapters on ``target_modules`` (peft ``get_peft_model``).

    Args:
        model: a transformers model (causal LM, or token-classification critic).
        rank: r >= 1. alpha: the scale numerator (scaling = alpha / r). dropout: on the adapter input.
        target_modules: names of the linear layers to adapt (e.g. ``q_proj``).
        base_path: the directory or hub id of the base weights, recorded in the adapter's config
            (made absolute when it is a local directory).
        critic: keep the value head ``score`` fully trainable (saved with the adapter).
        modules_to_save: more modules trained in full and saved with the adapter (e.g. ``norm``: every
            RMSNorm, whose weights set the scale of the logits that the adapters alone cannot).
        layers_to_transform: indices of the transformer layers that get adapters (None: all).

    A vision-language model (Qwen2-VL, Qwen2.5-VL) gets adapters in its language model's layers only
    (a pattern over ``language_model.layers.<i>``): its vision tower stays as it is (trained in full or
    frozen by ``model.freeze_vision``, outside the adapter).

    Returns:
        a ``peft.PeftModel``.

    Raises:
        ValueError: rank < 1, or no target module found in the model.
    """
    from peft import LoraConfig, get_peft_model

    from verlog.vision import is_vision_language

    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    targets: list[str] | str = list(target_modules)
    if is_vision_language(getattr(model, "config", None)):
        # the language model's layers only: the vision tower's blocks have linear layers of the same names
        layers = "|".join(str(i) for i in layers_to_transform) if layers_to_transform is not None else r"\d+"
        targets = rf".*language_model\.layers\.({layers})\..*\.({'|'.join(map(re.escape, target_modules))})"
        layers_to_transform = None
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                        modules_to_save=(["score"] if critic else []) + list(modules_to_save or []) or None,
                        bias="none", layers_to_transform=layers_to_transform)
    peft_model = get_peft_model(model, config)
    local = Path(str(base_path))
    peft_model.peft_config["default"].base_model_name_or_path = str(local.resolve()) if local.is_dir() else str(base_path)
    return peft_model


def _lora_layers(base: torch.nn.Module) -> dict[str, Any]:
    """{"<module>.base_layer.weight": LoRA layer} for every adapted linear layer of ``base``."""
    from peft.tuners.lora import LoraLayer

    return {f"{name}.base_layer.weight": m for name, m in base.named_modules()
            if isinstance(m, LoraLayer) and hasattr(m, "get_delta_weight")}


def merged_named_parameters(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the merged model W0 + (alpha / r) B A, under the base model's names.

    Adapter matrices are folded into their layers' weights; a fully trained module kept by
    ``modules_to_save`` (the critic's head) replaces its original. Tensors are detached; merged
    ones are new, the others are the parameters themselves. Not for ZeRO-3 partitioned models.

    Args:
        model: a ``peft.PeftModel`` with one adapter, ``default``.
    """
    base = model.get_base_model()
    layers = _lora_layers(base)
    with torch.no_grad():
        for name, p in base.named_parameters():
            if ".lora_" in name or ".original_module." in name:
                continue
            tensor = p.detach()
            if name in layers:
                tensor = tensor + layers[name].get_delta_weight("default").to(tensor.dtype)
            yield name.replace(".base_layer.", ".").replace(".modules_to_save.default.", "."), tensor


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a saved adapter (``adapter_config.json``, no full ``config.json``)."""
    p = Path(str(path))
    return (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def load_adapter_dir(path: str | Path, load_base: Any, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The merged model of a saved adapter: its base (``load_base(base_path, dtype)``) plus the adapter.

    Raises:
        FileNotFoundError: no adapter config in ``path``.
    """
    from peft import PeftModel

    config_file = Path(str(path)) / ADAPTER_CONFIG
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} does not exist")
    base_path = json.loads(config_file.read_text())["base_model_name_or_path"]
    return PeftModel.from_pretrained(load_base(base_path, dtype), str(path)).merge_and_unload()
