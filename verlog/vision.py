"""Vision-language models (Qwen2-VL and Qwen2.5-VL): the image inputs a turn carries, the family's chat
template and image placeholders, and the critic (the same network with a scalar value head).

A prompt with images holds, for each image, ``<|vision_start|>`` then ``n`` copies of ``<|image_pad|>``
then ``<|vision_end|>``, where ``n = t * h * w / merge_size**2`` for the image's patch grid
``image_grid_thw = (t, h, w)``; the model replaces the placeholders' embeddings by the vision tower's
output, in order. The pixel values of all images of a prompt are its :class:`VisionInput`.

Shapes: P patches (the sum of ``t * h * w`` over the images), D = channels x temporal patch x patch
size squared (the image processor's flattened patch), K images.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

__all__ = [
    "IMAGE_PAD", "VISION_END", "VISION_LANGUAGE_MODEL_TYPES", "VISION_SPECIAL_TOKENS", "VISION_START",
    "VL_CHAT_TEMPLATE", "VisionInput", "cat_vision_inputs", "copy_image_processor", "critic_class",
    "expand_image_pads", "image_input", "is_vision_language", "load_image_processor", "register_critics",
    "vision_kwargs", "vision_tower",
]

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
#: The family's vision special tokens, in the order the tiny tokenizer adds them (after its own).
VISION_SPECIAL_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
#: ``config.model_type`` of the vision-language families Verlog trains.
VISION_LANGUAGE_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")

VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML with Qwen2-VL's content parts: a message's content is a str, or a list of ``{"type": "text",
"text": ...}`` and ``{"type": "image"}`` parts, an image written as one ``<|image_pad|>`` between
``<|vision_start|>`` and ``<|vision_end|>`` (as Qwen2-VL's own template writes it; the processor, here
:func:`expand_image_pads`, repeats the pad to the image's token count). No default system prompt."""


@dataclass(frozen=True)
class VisionInput:
    """The images of one prompt, as the vision tower takes them.

    Attributes:
        pixel_values: [P, D] float32, the flattened patches of every image, image after image.
        image_grid_thw: [K, 3] long, each image's patch grid (temporal, height, width).
    """

    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor

    @property
    def num_images(self) -> int:
        """K."""
        return int(self.image_grid_thw.shape[0])

    def token_counts(self, merge_size: int) -> list[int]:
        """Placeholder tokens of each image: ``t * h * w // merge_size**2``."""
        return [int(n) // merge_size**2 for n in self.image_grid_thw.prod(-1).tolist()]

    def to_dict(self) -> dict[str, torch.Tensor]:
        """``{"pixel_values", "image_grid_thw"}`` (for ``torch.save``)."""
        return {"pixel_values": self.pixel_values, "image_grid_thw": self.image_grid_thw}


def cat_vision_inputs(inputs: Sequence[Optional[VisionInput]]) -> Optional[VisionInput]:
    """The images of several prompts in order, as one batch's vision input (``None`` entries skipped);
    ``None`` when no prompt has images."""
    present = [v for v in inputs if v is not None and v.num_images]
    if not present:
        return None
    return VisionInput(torch.cat([v.pixel_values for v in present]), torch.cat([v.image_grid_thw for v in present]))


def vision_kwargs(inputs: Sequence[Optional[VisionInput]] | None, device: torch.device | str,
                  dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The forward keywords (``pixel_values``, ``image_grid_thw``) of a batch whose rows have ``inputs``
    (on ``device``; pixel values cast to ``dtype`` when given); ``{}`` when no row has an image."""
    joined = cat_vision_inputs(inputs or [])
    if joined is None:
        return {}
    pixels = joined.pixel_values.to(device)
    return {"pixel_values": pixels.to(dtype) if dtype is not None else pixels,
            "image_grid_thw": joined.image_grid_thw.to(device)}


def is_vision_language(config: Any) -> bool:
    """Whether a transformers config is of a vision-language family of :data:`VISION_LANGUAGE_MODEL_TYPES`."""
    return getattr(config, "model_type", None) in VISION_LANGUAGE_MODEL_TYPES


def image_input(image_processor: Any, image: np.ndarray) -> VisionInput:
    """One image through the family's image processor.

    Args:
        image_processor: a Qwen2-VL image processor (``AutoImageProcessor`` of the model directory).
        image: [H, W, 3] uint8 RGB.

    Raises:
        ValueError: not an [H, W, 3] uint8 array.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"an image must be an [H, W, 3] uint8 array, got {image.dtype} {image.shape}")
    out = image_processor(images=[image], return_tensors="pt")
    return VisionInput(out["pixel_values"].float(), out["image_grid_thw"].long())


def expand_image_pads(text: str, token_counts: Sequence[int]) -> str:
    """``text`` with its k-th ``<|image_pad|>`` repeated ``token_counts[k]`` times (what the family's
    processor does to a rendered chat template).

    Raises:
        ValueError: the text holds another number of image pads than ``token_counts`` has entries.
    """
    parts = text.split(IMAGE_PAD)
    if len(parts) - 1 != len(token_counts):
        raise ValueError(f"the prompt holds {len(parts) - 1} image placeholders for {len(token_counts)} images")
    out = [parts[0]]
    for count, part in zip(token_counts, parts[1:]):
        out.append(IMAGE_PAD * count + part)
    return "".join(out)


@functools.lru_cache(maxsize=8)
def load_image_processor(path: str) -> Any:
    """The image processor saved in the model directory ``path`` (``AutoImageProcessor``), cached per path.

    Raises:
        OSError: the directory has no image processor.
    """
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(os.fspath(path))


def copy_image_processor(tokenizer: Any, out_dir: str | os.PathLike) -> bool:
    """Save the image processor of the model the tokenizer was loaded from (``tokenizer.name_or_path``,
    a directory or a hub id) into ``out_dir``, so a saved model directory keeps its processor; returns
    whether there was one (text models have none; nothing is written then)."""
    from pathlib import Path

    source = str(getattr(tokenizer, "name_or_path", "") or "")
    if not source or (Path(source).is_dir() and not (Path(source) / "preprocessor_config.json").is_file()):
        return False
    try:
        processor = load_image_processor(source)
    except (OSError, ValueError):  # no image processor there: a text model
        return False
    processor.save_pretrained(out_dir)
    return True


def vision_tower(model: Any) -> torch.nn.Module | None:
    """The vision encoder (``.visual``) of a vision-language actor or critic, wrapped (DeepSpeed, peft)
    or not; ``None`` for a text-only model."""
    module = getattr(model, "module", model)
    if hasattr(module, "get_base_model"):
        module = module.get_base_model()
    inner = getattr(module, "model", None)
    return getattr(inner, "visual", None) or getattr(module, "visual", None)


@functools.lru_cache(maxsize=None)
def critic_class(model_type: str) -> type:
    """The critic class of a vision-language family: its ``*Model`` (vision tower + language model)
    with a ``score = Linear(hidden, num_labels)`` head on every position, registered with
    ``AutoModelForTokenClassification`` for the family's config, so ``load_critic`` and
    ``from_pretrained`` of a saved critic work as for text models.

    Its forward takes the family model's inputs (``input_ids``, ``attention_mask``, ``pixel_values``,
    ``image_grid_thw``, ...) and returns ``.logits`` [B, S, num_labels].

    Raises:
        ValueError: a model type outside :data:`VISION_LANGUAGE_MODEL_TYPES`.
    """
    from transformers import AutoModelForTokenClassification
    from transformers.modeling_outputs import TokenClassifierOutput

    if model_type == "qwen2_vl":
        from transformers.models.qwen2_vl import modeling_qwen2_vl as mod
        from transformers import Qwen2VLConfig as config_cls
        base, pretrained, name = mod.Qwen2VLModel, mod.Qwen2VLPreTrainedModel, "Qwen2VLForTokenClassification"
    elif model_type == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as mod
        from transformers import Qwen2_5_VLConfig as config_cls
        base, pretrained, name = mod.Qwen2_5_VLModel, mod.Qwen2_5_VLPreTrainedModel, "Qwen2_5_VLForTokenClassification"
    else:
        raise ValueError(f"no vision-language critic for model type {model_type!r}")

    def __init__(self: Any, config: Any) -> None:
        pretrained.__init__(self, config)
        self.num_labels = getattr(config, "num_labels", 1)
        self.model = base(config)
        self.score = torch.nn.Linear(config.get_text_config().hidden_size, self.num_labels)
        self.post_init()

    def get_input_embeddings(self: Any) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self: Any, value: torch.nn.Module) -> None:
        self.model.set_input_embeddings(value)

    def forward(self: Any, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                pixel_values: Optional[torch.Tensor] = None, image_grid_thw: Optional[torch.Tensor] = None,
                use_cache: Optional[bool] = None, **kwargs: Any) -> Any:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         inputs_embeds=inputs_embeds, pixel_values=pixel_values, image_grid_thw=image_grid_thw,
                         use_cache=False, **kwargs)
        return TokenClassifierOutput(logits=self.score(out.last_hidden_state))

    cls = type(name, (pretrained,), {
        "__init__": __init__, "forward": forward, "get_input_embeddings": get_input_embeddings,
        "set_input_embeddings": set_input_embeddings, "__module__": __name__,
        "__doc__": f"{base.__name__} with a per-position value head ``score`` (Verlog's critic)."})
    AutoModelForTokenClassification.register(config_cls, cls, exist_ok=True)
    # Checkpoints of the family keep the language model's weights under ``model.`` and the vision
    # tower's under ``visual.`` (transformers renames them on load, by class name): the critic, whose
    # ``model`` is the family's, loads and saves them the way its generation class does.
    from transformers.conversion_mapping import (get_checkpoint_conversion_mapping,
                                                 register_checkpoint_conversion_mapping)

    register_checkpoint_conversion_mapping(
        name, get_checkpoint_conversion_mapping("Qwen2VLForConditionalGeneration"), overwrite=True)
    return cls


def register_critics() -> None:
    """Register the critic class of every family of :data:`VISION_LANGUAGE_MODEL_TYPES` (idempotent)."""
    for model_type in VISION_LANGUAGE_MODEL_TYPES:
        critic_class(model_type)
