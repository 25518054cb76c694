"""Model loading for Verlog: the actor (causal LM), the critic (same backbone + scalar value
head) and padding-safe forwards. The tiny offline model is built by :mod:`verlog.tiny_model`.

Shapes: B = batch size, S = sequence length (padded), V = vocabulary size.
All batches are LEFT-padded; ``attention_mask`` is 1 on real tokens, 0 on padding.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

__all__ = [
    "ModelLoadError",
    "load_tokenizer",
    "load_actor",
    "load_critic",
    "is_critic_dir",
    "position_ids_from_mask",
    "causal_lm_logits",
    "critic_values",
]


from verlog.vision import is_vision_language, register_critics


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded (missing path, not a model directory,
    no chat template, offline hub id, wrong kind of checkpoint). The message is one line."""


# ----------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------


def _short(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _check_local(path: str | os.PathLike, what: str, required_file: str) -> str:
    """Fail fast on a path that is clearly local but unusable; return the str path/id."""
    text = os.fspath(path)
    p = Path(text).expanduser()
    looks_local = p.is_absolute() or text.startswith((".", "~")) or p.exists() or text.count("/") > 1
    if looks_local:
        if not p.exists():
            raise ModelLoadError(f"cannot load {what} '{text}': no such directory")
        if not p.is_dir():
            raise ModelLoadError(f"cannot load {what} '{text}': not a directory")
        if not (p / required_file).is_file():
            raise ModelLoadError(f"cannot load {what} '{text}': not a model directory (no {required_file})")
        return str(p)
    return text  # an 'org/name' hub id: let transformers resolve it (cache or hub)


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Load a tokenizer with ``padding_side="left"`` (Verlog left-pads every batch).

    When the tokenizer has no pad token, the eos token is used as pad (documented fallback,
    normal for instruct models; engines cut responses at the first eos, so pad == eos is
    harmless).

    Args:
        path: a model directory or a hub id (resolved from the local HF cache when offline).

    Raises:
        ModelLoadError: the path does not exist / is not a model directory, transformers
            cannot load it, it has no chat template, or it has neither pad nor eos token.
    """
    name = _check_local(path, "tokenizer", "tokenizer_config.json")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, padding_side="left")
    except Exception as exc:  # transformers raises OSError, ValueError, hub errors, ...
        raise ModelLoadError(f"cannot load tokenizer '{name}': {_short(exc)}") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"cannot load tokenizer '{name}': it has no chat template")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"cannot load tokenizer '{name}': it has neither pad nor eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_config(name: str):
    try:
        return AutoConfig.from_pretrained(name)
    except Exception as exc:
        raise ModelLoadError(f"cannot load model '{name}': {_short(exc)}") from exc


def is_critic_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a saved critic (a ``*ForTokenClassification`` checkpoint).

    Raises:
        ModelLoadError: as :func:`load_actor` for missing/unreadable paths.
    """
    config = _load_config(_check_local(path, "model", "config.json"))
    return any(a.endswith("ForTokenClassification") for a in (config.architectures or []))


def load_actor(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """Load a causal LM (``AutoModelForCausalLM``) with every weight from the checkpoint.

    A LoRA checkpoint directory (an adapter, :mod:`verlog.lora`) gives its base with the adapter merged.

    Args:
        path: model directory or hub id.
        dtype: parameter dtype.

    Returns:
        the model in eval mode (call ``.train()`` to train it).

    Raises:
        ModelLoadError: missing path / not a model directory / load failure (one line),
            a saved critic given as actor, or checkpoint weights missing from the file.

    A vision-language model (:func:`~verlog.vision.is_vision_language`: Qwen2-VL, Qwen2.5-VL) is loaded
    with ``AutoModelForImageTextToText`` (its ``*ForConditionalGeneration``: vision tower + causal LM).
    """
    from verlog.lora import is_adapter_dir, load_adapter_dir

    if is_adapter_dir(path):  # a LoRA checkpoint: its base plus the adapter, merged
        try:
            return load_adapter_dir(path, lambda base, dt: load_actor(base, dtype=dt), dtype)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"cannot load adapter '{path}': {_short(exc)}") from exc
    name = _check_local(path, "model", "config.json")
    config = _load_config(name)
    if any(a.endswith("ForTokenClassification") for a in (config.architectures or [])):
        raise ModelLoadError(f"cannot load model '{name}' as actor: it is a saved critic ({config.architectures})")
    auto = AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM
    try:
        model, info = auto.from_pretrained(
            name, config=config, dtype=dtype, output_loading_info=True
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load model '{name}': {_short(exc)}") from exc
    if info["missing_keys"]:
        raise ModelLoadError(f"cannot load model '{name}': weights missing from checkpoint: "
                             f"{sorted(info['missing_keys'])[:5]}")
    return model


def load_critic(
    path: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    value_head_init_std: float = 0.0,
) -> PreTrainedModel:
    """Load a critic: the backbone of ``path`` plus a scalar value head.

    The model is transformers' ``AutoModelForTokenClassification`` with ``num_labels=1``
    (for Qwen2: ``Qwen2ForTokenClassification``, head ``score = Linear(hidden, 1, bias)``; for a
    vision-language family, its vision tower and language model with the same head,
    :func:`~verlog.vision.critic_class`)
    and head dropout forced to 0 (``classifier_dropout=0.0``) so values in training and
    scoring agree. From a causal-LM directory the head is fresh: weight zero
    (``value_head_init_std == 0``) or drawn from N(0, std²) with the global torch RNG, bias
    zero; the LM head is dropped. From a saved critic directory (architectures
    ``*ForTokenClassification``) the trained head is kept and ``value_head_init_std`` is
    ignored.

    Raises:
        ValueError: ``value_head_init_std < 0``.
        ModelLoadError: as :func:`load_actor`; also a saved critic whose ``num_labels != 1``,
            or backbone weights missing from the checkpoint.
    """
    if not value_head_init_std >= 0.0:
        raise ValueError(f"value_head_init_std must be >= 0, got {value_head_init_std}")
    name = _check_local(path, "model", "config.json")
    config = _load_config(name)
    saved_critic = any(a.endswith("ForTokenClassification") for a in (config.architectures or []))
    if saved_critic and config.num_labels != 1:
        raise ModelLoadError(f"cannot load critic '{name}': saved head has {config.num_labels} outputs, not 1")
    config.num_labels = 1
    config.classifier_dropout = 0.0
    if is_vision_language(config):
        register_critics()  # the family's *ForTokenClassification (verlog.vision.critic_class)
    try:
        model, info = AutoModelForTokenClassification.from_pretrained(
            name, config=config, dtype=dtype, output_loading_info=True
        )
    except Exception as exc:
        raise ModelLoadError(f"cannot load critic '{name}': {_short(exc)}") from exc
    head = model.score
    head_names = {f"score.{n}" for n, _ in head.named_parameters()}
    missing = set(info["missing_keys"])
    allowed_missing = set() if saved_critic else head_names
    if missing - allowed_missing:
        raise ModelLoadError(f"cannot load critic '{name}': weights missing from checkpoint: "
                             f"{sorted(missing - allowed_missing)[:5]}")
    if not saved_critic:
        with torch.no_grad():
            if value_head_init_std == 0.0:
                head.weight.zero_()
            else:
                head.weight.normal_(0.0, value_head_init_std)
            if head.bias is not None:
                head.bias.zero_()
    return model


# ----------------------------------------------------------------------------------------
# Padding-safe forwards
# ----------------------------------------------------------------------------------------


def _check_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, S], got shape {tuple(input_ids.shape)}")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape "
                         f"{tuple(input_ids.shape)}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must contain only 0 and 1")


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions of real tokens counted from each row's first real token.

    Args:
        attention_mask: [B, S] of 0/1 (left padding).

    Returns:
        [B, S] long: ``cumsum(mask) - 1`` on real tokens, 0 on padding — the positions an
        unpadded forward of each row would use (same rule as transformers' generate).
    """
    mask = attention_mask.long()
    return (mask.cumsum(-1) - 1).clamp(min=0) * mask


def causal_lm_logits(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Next-token logits of a left-padded batch, equal to each row's unpadded forward.

    Args:
        model: a causal LM.
        input_ids: [B, S] long.
        attention_mask: [B, S] 0/1.

    Returns:
        [B, S, V] logits in the model's dtype; ``logits[b, s]`` scores token ``s + 1``;
        positions where ``attention_mask == 0`` are set to 0. Gradients flow when enabled.

    Raises:
        ValueError: bad shapes or a non-0/1 mask.
    """
    _check_batch(input_ids, attention_mask)
    out = model(input_ids=input_ids, attention_mask=attention_mask,
                position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    return out.logits.masked_fill(attention_mask.unsqueeze(-1) == 0, 0.0)


def critic_values(
    critic: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Per-position scalar values V(prefix up to and including token s) of a left-padded batch.

    Args:
        critic: a model from :func:`load_critic` (token classification, one label).
        input_ids: [B, S] long.
        attention_mask: [B, S] 0/1.

    Returns:
        [B, S] float32 values, equal to each row's unpadded forward; 0 at padding positions.
        Gradients flow when enabled.

    Raises:
        ValueError: bad shapes, a non-0/1 mask, or a critic with more than one output.
    """
    _check_batch(input_ids, attention_mask)
    out = critic(input_ids=input_ids, attention_mask=attention_mask,
                 position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    if out.logits.shape[-1] != 1:
        raise ValueError(f"critic must have a single output, got {out.logits.shape[-1]}")
    return out.logits[..., 0].float().masked_fill(attention_mask == 0, 0.0)
