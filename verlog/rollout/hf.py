"""Rollout engine on transformers ``generate`` (the CPU / test backend)."""

from __future__ import annotations

import operator
import os
from typing import Iterable, Sequence

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from verlog.models import load_actor, load_tokenizer
from verlog.rollout.engine import Generation, SamplingParams
from verlog.vision import VisionInput, vision_kwargs

__all__ = ["HFEngine", "check_request", "eos_token_ids"]


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, generation_config: GenerationConfig | None) -> list[int]:
    """Sorted union of the tokenizer's eos id and the generation config's eos id(s).

    (Qwen instruct models stop at both ``<|im_end|>`` and ``<|endoftext|>``.)

    Raises:
        ValueError: neither defines an eos token.
    """
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(generation_config, "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in ([gen_eos] if isinstance(gen_eos, int) else gen_eos))
    if not ids:
        raise ValueError("no eos token: neither the tokenizer nor the generation config defines one")
    return sorted(ids)


def check_request(
    prompts: Sequence[Sequence[int]], params: SamplingParams, vocab_size: int, max_len: int
) -> list[list[int]]:
    """Validate a generate() request; return the prompts as lists of Python ints.

    Args:
        prompts: token-id lists, each non-empty, ids in [0, vocab_size).
        params: sampling parameters.
        vocab_size: the model's vocabulary size V.
        max_len: the model's context length; ``len(prompt) + max_tokens`` must fit.

    Raises:
        ValueError: empty batch or prompt, an id out of range, a prompt too long for
            ``max_len``, or out-of-range sampling parameters.
        TypeError: a prompt that is not a sequence of ints.
    """
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
    if not isinstance(params.max_tokens, int) or params.max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {params.max_tokens!r}")
    if not params.temperature >= 0.0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if not isinstance(params.top_k, int) or params.top_k < -1:
        raise ValueError(f"top_k must be an int >= -1 (-1 or 0 disable it), got {params.top_k!r}")
    if isinstance(prompts, (str, bytes)) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    out: list[list[int]] = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor):
            prompt = prompt.tolist()
        try:
            if isinstance(prompt, (str, bytes)):
                raise TypeError
            ids = [operator.index(t) for t in prompt]
        except TypeError:
            raise TypeError(f"prompt {i} must be a sequence of int token ids") from None
        if not ids:
            raise ValueError(f"prompt {i} is empty")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"prompt {i} has a token id outside [0, {vocab_size})")
        if len(ids) + params.max_tokens > max_len:
            raise ValueError(f"prompt {i}: {len(ids)} tokens + max_tokens {params.max_tokens} "
                             f"exceeds the context length {max_len}")
        out.append(ids)
    return out


class HFEngine:
    """Batched, left-padded ``model.generate`` implementing ``RolloutEngine``.

    Sampling: greedy (``params.is_greedy``) is argmax; otherwise temperature, top-p and
    top-k (``-1``/``0`` off) are applied exactly as given — the model's own
    generation_config sampling defaults (repetition penalty etc.) are NOT used.
    Generation stops at any id of :attr:`eos_token_ids`.

    Logprobs are ``log_softmax`` of the raw logits (``output_logits=True``) divided by the
    sampling temperature (1 when greedy), i.e. under the tempered distribution before top-p/top-k,
    in nats, computed in float32.

    Vision-language models (Qwen2-VL, Qwen2.5-VL) take each prompt's images (``images`` of
    :meth:`generate`); their image and video placeholder tokens are never sampled (suppressed in
    sampling; the logprobs stay those of the tempered distribution before suppression).

    Determinism: every call runs under ``torch.random.fork_rng`` with a call seed —
    ``params.seed`` if given, else the next draw from the engine's own ``torch.Generator``
    seeded with ``seed`` — so results depend only on (engine seed, call order, batch) and
    the global torch RNG is untouched. Sampled tokens of one prompt depend on the rest of
    the batch (one RNG stream per batch). The model runs in eval mode during ``generate``
    (its train/eval flag is restored afterwards). Memory: ``output_logits`` keeps
    B x L x V logits.

    Args:
        model_or_path: a causal LM (used as is, not copied; its dtype/device must equal
            ``dtype``/``device``) or a model directory loaded with ``load_actor``.
        tokenizer: a tokenizer or a path for ``load_tokenizer``; supplies eos / pad ids.
        dtype: parameter dtype.
        device: torch device for generation.
        seed: seed of the engine's sampling stream.

    Raises:
        ValueError: a given model whose dtype/device differs from ``dtype``/``device``; no
            pad/eos token.
        ModelLoadError: loading from a path failed.
    """

    def __init__(
        self,
        model_or_path: PreTrainedModel | str | os.PathLike,
        tokenizer: PreTrainedTokenizerBase | str | os.PathLike,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        self.device = torch.device(device)
        if isinstance(model_or_path, (str, os.PathLike)):
            model = load_actor(model_or_path, dtype=dtype).to(self.device)
        else:
            model = model_or_path
            if model.dtype != dtype:
                raise ValueError(f"HFEngine: model dtype {model.dtype} != requested dtype {dtype}")
            if model.device.type != self.device.type or (
                self.device.index is not None and model.device.index != self.device.index
            ):
                raise ValueError(f"HFEngine: model is on {model.device}, engine device is {self.device}")
        self._model = model
        self.tokenizer = tokenizer if isinstance(tokenizer, PreTrainedTokenizerBase) else load_tokenizer(tokenizer)
        self.eos_token_ids = eos_token_ids(self.tokenizer, model.generation_config)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            raise ValueError("HFEngine: the tokenizer has no pad token (use verlog.models.load_tokenizer)")
        self.pad_token_id = int(pad)
        self._generator = torch.Generator().manual_seed(int(seed))
        # A vision-language model never samples its image/video placeholders: one in a response would
        # ask the vision tower for an image that the turn does not have.
        config = model.config
        self._suppressed = sorted({int(getattr(config, k)) for k in ("image_token_id", "video_token_id")
                                   if getattr(config, k, None) is not None})

    @property
    def generator(self) -> torch.Generator:
        """The engine's sampling stream (call seeds are drawn from it); checkpoints save its state."""
        return self._generator

    @property
    def model(self) -> PreTrainedModel:
        """The engine's causal LM."""
        return self._model

    def _call_seed(self, params: SamplingParams) -> int:
        if params.seed is not None:
            return int(params.seed)
        return int(torch.randint(0, 2**62, (1,), generator=self._generator).item())

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        # Every processor-relevant field is set explicitly: transformers fills unset (None)
        # fields from the model's generation_config and then from global defaults (top_k=50).
        greedy = params.is_greedy
        return GenerationConfig(
            max_new_tokens=params.max_tokens,
            min_new_tokens=0,
            do_sample=not greedy,
            temperature=1.0 if greedy else float(params.temperature),
            top_p=1.0 if greedy else float(params.top_p),
            # top_k is unused by greedy decoding (transformers warns if it is set there).
            top_k=None if greedy else (0 if params.top_k <= 0 else int(params.top_k)),
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            num_return_sequences=1,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            suppress_tokens=self._suppressed or None,
            output_logits=True,
            return_dict_in_generate=True,
        )

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 images: Sequence[VisionInput | None] | None = None) -> list[Generation]:
        """Generate one response per prompt, in order.

        Args:
            prompts: B token-id lists (no padding).
            params: sampling parameters.
            images: for a vision-language model, each prompt's images (``None``: none), whose
                placeholder tokens the prompt's ids already hold (:mod:`verlog.vision`); passed to
                ``generate`` as ``pixel_values`` and ``image_grid_thw``.

        Returns:
            B ``Generation``: response ids up to and including the first eos
            (``finish_reason="stop"``), or exactly ``max_tokens`` ids without eos
            (``"length"``); per-token logprobs of the tempered distribution (class docstring).

        Raises:
            ValueError / TypeError: see :func:`check_request`.
        """
        config = self._model.config.get_text_config()  # a vision-language config keeps them in text_config
        ids = check_request(prompts, params, config.vocab_size, config.max_position_embeddings)
        if images is not None and len(images) != len(ids):
            raise ValueError(f"HFEngine: {len(images)} image inputs for {len(ids)} prompts")
        width = max(len(p) for p in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, prompt in enumerate(ids):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt):] = 1
        fork_devices = [self.device] if self.device.type == "cuda" else []
        was_training = self._model.training
        self._model.eval()  # no dropout while sampling, even on a model shared with a trainer
        try:
            with torch.inference_mode(), torch.random.fork_rng(devices=fork_devices,
                                                               device_type=self.device.type):
                torch.manual_seed(self._call_seed(params))
                out = self._model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=attention_mask.to(self.device),
                    generation_config=self._generation_config(params),
                    **vision_kwargs(images, self.device, self._model.dtype),
                )
        finally:
            self._model.train(was_training)
        with torch.inference_mode():
            new_tokens = out.sequences[:, width:].cpu()
            steps = new_tokens.shape[1]
            token_logprobs = torch.empty(new_tokens.shape, dtype=torch.float32)
            scale = 1.0 if params.is_greedy else float(params.temperature)
            for t, logits in enumerate(out.logits):  # one [B, V] tensor per step, raw logits
                logits = logits.float().cpu() / scale
                chosen = logits.gather(1, new_tokens[:, t:t + 1]).squeeze(1)
                token_logprobs[:, t] = chosen - torch.logsumexp(logits, dim=-1)

        is_eos = torch.isin(new_tokens, torch.tensor(self.eos_token_ids))
        results = []
        for row in range(len(ids)):
            hits = is_eos[row].nonzero()
            if len(hits):
                length, reason = int(hits[0]) + 1, "stop"
            else:
                if steps != params.max_tokens:
                    raise RuntimeError(f"HFEngine: row {row} has no eos but only {steps} of "
                                       f"{params.max_tokens} tokens")
                length, reason = steps, "length"
            results.append(Generation(
                token_ids=new_tokens[row, :length].tolist(),
                logprobs=token_logprobs[row, :length].tolist(),
                finish_reason=reason,
            ))
        return results

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy trainer weights (HF parameter names) into the engine's model, strictly.

        Tied parameters (e.g. ``lm_head.weight`` / ``model.embed_tokens.weight``) may be
        given under either name; if both are given they must be equal. Values are cast to
        the engine's dtype/device.

        Args:
            named_tensors: (name, tensor) pairs, e.g. ``trainer_model.named_parameters()``.

        Raises:
            KeyError: an unknown name, or a parameter not provided (under any alias).
            ValueError: a duplicate name, a shape mismatch, or tied aliases that differ.
        """
        targets: dict[str, torch.Tensor] = dict(self._model.named_parameters(remove_duplicate=False))
        targets.update((n, b) for n, b in self._model.state_dict(keep_vars=True).items() if n not in targets)
        groups: dict[int, list[str]] = {}
        for name, tensor in targets.items():
            groups.setdefault(id(tensor), []).append(name)

        given: dict[str, torch.Tensor] = {}
        for name, tensor in named_tensors:
            if name in given:
                raise ValueError(f"load_weights: duplicate tensor name '{name}'")
            if name not in targets:
                raise KeyError(f"load_weights: unknown parameter name '{name}'")
            if tuple(tensor.shape) != tuple(targets[name].shape):
                raise ValueError(f"load_weights: '{name}' has shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(targets[name].shape)}")
            given[name] = tensor
        missing = [names[0] for names in groups.values() if not any(n in given for n in names)]
        if missing:
            raise KeyError(f"load_weights: {len(missing)} parameter(s) not provided, e.g. {missing[:3]}")
        with torch.no_grad():
            for names in groups.values():
                provided = [n for n in names if n in given]
                first = given[provided[0]]
                for other in provided[1:]:
                    if not torch.equal(given[other].to(first.device, first.dtype), first):
                        raise ValueError(f"load_weights: tied '{provided[0]}' and '{other}' differ")
                targets[names[0]].copy_(first)
