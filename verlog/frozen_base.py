"""A decoder whose lower layers are frozen, run in two parts: the frozen base once, the trained top often.

With ``model.trainable_layers`` = k only the top k of a model's L transformer layers train; the
embeddings and layers ``0 .. L-k-1`` never change in a run. Their output for a turn's tokens (the
hidden states entering layer ``L-k``, called the *frozen hidden states* here) is therefore the same
at scoring and in every update epoch, and, when the critic starts from the same weights as the
actor, the same for both. ``model.cache_frozen_activations`` computes it once per turn and runs only
the top k layers, the final norm and the head from it afterwards: the forward over the frozen layers
is paid once per iteration instead of once per model, per scoring pass and per epoch.

The two parts are the model's own forward with its layer list swapped for a slice of it (the lower
slice and an identity in place of the final norm; or the top slice fed the frozen hidden states as
``inputs_embeds``), so rotary positions, the causal mask and attention kernels are the model's own.
That holds for decoders whose forward passes ``inputs_embeds`` to the first layer unchanged and gives
every layer the same kind of attention mask (:data:`SPLITTABLE_MODEL_TYPES`); other models are refused.
DeepSpeed ZeRO stages 0-2 keep every parameter whole on each rank, so the swap is safe under them.

Shapes: B rows, S positions (right-padded rows), H hidden size.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch

__all__ = ["FROZEN_BELOW", "SPLITTABLE_MODEL_TYPES", "backbone", "check_splittable", "decoder_layers",
           "forward", "frozen_below", "frozen_hidden", "same_frozen_base", "share_frozen_base", "unwrap"]

#: The attribute of a transformers model that names the first trained layer (set by
#: :func:`verlog.training_models.train_top_layers`): the frozen hidden states enter that layer.
#: None (or absent): the model runs whole, frozen hidden states or not.
FROZEN_BELOW = "verlog_frozen_below"

#: Model types whose forward is known to be splittable (``inputs_embeds`` reach the first layer
#: unscaled, one attention kind for every layer in the configs checked by :func:`check_splittable`).
SPLITTABLE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def unwrap(model: Any) -> torch.nn.Module:
    """The transformers model inside a DeepSpeed engine and/or a peft wrapper (or ``model`` itself)."""
    module = getattr(model, "module", model)
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def backbone(model: Any) -> torch.nn.Module:
    """The transformer backbone (``.layers``, ``.norm``) of a causal LM or critic, wrapped or not.

    Raises:
        ValueError: the model has no ``<backbone>.layers`` list.
    """
    base = unwrap(model)
    found = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    if found is None or not isinstance(getattr(found, "layers", None), torch.nn.ModuleList):
        raise ValueError(f"model.trainable_layers: {type(base).__name__} has no transformer layer list "
                         "(<backbone>.layers) to choose the top layers from")
    return found


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    """The transformer layers, bottom first, of a causal LM or critic (wrapped or not).

    Raises:
        ValueError: the model has no ``<backbone>.layers`` list.
    """
    return backbone(model).layers


def frozen_below(model: Any) -> Optional[int]:
    """The index of the first trained layer of ``model`` (wrapped or not), or None when it has no
    frozen base that :func:`forward` may use."""
    return getattr(unwrap(model), FROZEN_BELOW, None)


def check_splittable(model: Any) -> None:
    """Refuse a model whose forward cannot be run in two parts.

    Raises:
        ValueError: one line naming ``model.cache_frozen_activations``: the model type is not in
            :data:`SPLITTABLE_MODEL_TYPES`, its layers use different attention kinds (sliding
            window on some), or its backbone has no ``layers``/``norm``.
    """
    base = unwrap(model)
    config = base.config
    kind = getattr(config, "model_type", None)
    if kind not in SPLITTABLE_MODEL_TYPES:
        raise ValueError(f"model.cache_frozen_activations: model type {kind!r} is not supported "
                         f"(supported: {', '.join(SPLITTABLE_MODEL_TYPES)})")
    if len(set(getattr(config, "layer_types", None) or ["full_attention"])) != 1:
        raise ValueError("model.cache_frozen_activations: the model's layers use different attention kinds "
                         f"({sorted(set(config.layer_types))}); only one kind for every layer is supported")
    if not hasattr(backbone(base), "norm"):
        raise ValueError(f"model.cache_frozen_activations: {type(base).__name__} has no final norm (<backbone>.norm)")


@contextmanager
def _only_layers(model: Any, lo: int, hi: int, *, final_norm: bool = True) -> Iterator[None]:
    """While open, ``model``'s backbone runs only its layers ``lo .. hi-1`` (and, with ``final_norm``
    False, an identity in place of its final norm)."""
    bb = backbone(model)
    layers, norm = bb.layers, bb.norm
    bb.layers = torch.nn.ModuleList(list(layers[lo:hi]))
    if not final_norm:
        bb.norm = torch.nn.Identity()
    try:
        yield
    finally:
        bb.layers, bb.norm = layers, norm


def frozen_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The frozen hidden states of a batch: the input of layer :func:`frozen_below` of ``model``.

    Args:
        model: a causal LM or critic (wrapped or not) whose layers below the top are frozen.
        input_ids: [B, S] long, right-padded rows.
        attention_mask: [B, S] 0/1.

    Returns:
        [B, S] x H float, without autograd; positions of padding hold values that no real position
        attends to (right padding, causal attention).

    Raises:
        ValueError: ``model`` has no frozen base (:func:`frozen_below` is None).
    """
    split = frozen_below(model)
    if split is None:
        raise ValueError("frozen_hidden: the model has no frozen base (model.trainable_layers unset)")
    bb = backbone(model)
    dev = next(bb.parameters()).device
    with torch.no_grad(), _only_layers(model, 0, split, final_norm=False):
        out = bb(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev), use_cache=False)
    return out.last_hidden_state


def forward(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            hidden: Optional[torch.Tensor] = None, hidden_split: Optional[int] = None, **kwargs: Any) -> Any:
    """``model``'s forward over a right-padded batch, from its frozen hidden states where they are given.

    With ``hidden`` ([B, S] x H, from :func:`frozen_hidden`) whose split ``hidden_split`` is
    :func:`frozen_below` of ``model``, only the layers from that split up run (fed ``hidden``);
    otherwise the whole model runs from ``input_ids``. The outputs are the same up to float rounding.

    Args:
        model: a causal LM or critic, or a DeepSpeed engine / peft model around one.
        input_ids: [B, S] long; attention_mask: [B, S] 0/1, on the model's device.
        hidden: [B, S] x H or None (moved to ``input_ids``' device).
        kwargs: passed on (e.g. ``logits_to_keep``).

    Returns:
        the model's output (``.logits``).
    """
    if hidden is not None and hidden_split is not None and hidden_split == frozen_below(model):
        with _only_layers(model, hidden_split, len(decoder_layers(model))):
            return model(inputs_embeds=hidden.to(input_ids.device), attention_mask=attention_mask,
                         use_cache=False, **kwargs)
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)


def same_frozen_base(a: Any, b: Any) -> bool:
    """Whether two models (wrapped or not) have the same split and equal embeddings and frozen layers,
    so that one's frozen hidden states are the other's."""
    split = frozen_below(a)
    if split is None or split != frozen_below(b):
        return False
    ea, eb = unwrap(a).get_input_embeddings().weight, unwrap(b).get_input_embeddings().weight
    if ea.shape != eb.shape or not torch.equal(ea, eb):
        return False
    for la, lb in zip(decoder_layers(a)[:split], decoder_layers(b)[:split]):
        pa, pb = dict(la.named_parameters()), dict(lb.named_parameters())
        if pa.keys() != pb.keys() or any(not torch.equal(pa[n], pb[n]) for n in pa):
            return False
    return True


def share_frozen_base(owner: Any, model: Any) -> bool:
    """Let ``model`` run on ``owner``'s frozen hidden states if its frozen base is ``owner``'s
    (:func:`same_frozen_base`); otherwise mark it to run whole (:data:`FROZEN_BELOW` None).
    Returns whether it shares them."""
    if same_frozen_base(owner, model):
        return True
    setattr(unwrap(model), FROZEN_BELOW, None)
    return False
