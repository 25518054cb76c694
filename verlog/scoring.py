"""Turn rows for forward passes: pack prompt + response, gather per-response-token outputs.

Each turn becomes one right-padded row ``prompt ids + response ids``. For response token k of a
row whose prompt has p tokens, the model output at position ``p - 1 + k`` is both the logit
vector that predicts token k and the critic's value V_k of the state before token k is generated
(so V_0, at the last prompt token, is the turn value). Right padding keeps positions 0..S-1 natural,
so no position ids are needed.

:func:`score_batch` runs the actor, the reference policy and the critic over a batch's turns
without gradients and returns what they give (:class:`Scores`); nothing is written into the batch.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

import torch

from verlog import frozen_base
from verlog.algos.logprobs import entropy_from_logits, logprobs_from_logits
from verlog.batch import TurnBatch
from verlog.vision import VisionInput, vision_kwargs


@dataclass
class Rows:
    """A set of turns as flat rows.

    Attributes:
        input_ids: [M, S] long, prompt then response, right-padded.
        attention_mask: [M, S] long, 1 on real tokens.
        prompt_lengths: [M] long.
        response_ids: [M, R] long.
        response_mask: [M, R] bool.
        hidden: [M, S] x H float, the frozen hidden states entering layer ``hidden_split`` of the
            models that share them (:func:`with_frozen_hidden`), or None.
        hidden_split: that layer's index, or None.
        images: per row, the images of its prompt (:class:`~verlog.vision.VisionInput`, or None for a
            row without), passed to the model with the row as ``pixel_values``/``image_grid_thw``;
            None when no row has images (text models).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_lengths: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    hidden: Optional[torch.Tensor] = None
    hidden_split: Optional[int] = None
    images: Optional[list[Optional[VisionInput]]] = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, index: torch.Tensor) -> "Rows":
        """Rows at ``index`` ([K] long), trimmed to their own longest sequence."""
        mask = self.attention_mask[index]
        width = int(mask.sum(-1).max())
        hidden = self.hidden[index, :width] if self.hidden is not None else None
        images = [self.images[i] for i in index.tolist()] if self.images is not None else None
        return Rows(self.input_ids[index, :width], mask[:, :width], self.prompt_lengths[index],
                    self.response_ids[index], self.response_mask[index], hidden, self.hidden_split, images)


def pack_rows(prompt_ids: torch.Tensor, prompt_lengths: torch.Tensor, response_ids: torch.Tensor,
              response_mask: torch.Tensor, pad_id: int) -> Rows:
    """Concatenate each prompt with its response into right-padded rows.

    Args:
        prompt_ids: [M, P] right-padded prompts; prompt_lengths: [M].
        response_ids: [M, R]; response_mask: [M, R] bool, left-aligned.
    """
    M = prompt_ids.shape[0]
    resp_len = response_mask.sum(-1)
    total = prompt_lengths + resp_len
    S = int(total.max())
    input_ids = torch.full((M, S), pad_id, dtype=torch.long)
    pos = torch.arange(S).unsqueeze(0)
    attention = (pos < total.unsqueeze(1)).long()
    width = min(prompt_ids.shape[1], S)
    in_prompt = pos[:, :width] < prompt_lengths.unsqueeze(1)
    input_ids[:, :width] = torch.where(in_prompt, prompt_ids[:, :width], input_ids[:, :width])
    k = pos - prompt_lengths.unsqueeze(1)
    in_resp = (k >= 0) & (k < resp_len.unsqueeze(1))
    rows, cols = in_resp.nonzero(as_tuple=True)
    input_ids[rows, cols] = response_ids[rows, k[rows, cols]]
    return Rows(input_ids, attention, prompt_lengths.clone(), response_ids.clone(), response_mask.clone())


def pack_pairs(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> Rows:
    """:func:`pack_rows` of token-id lists: row i is ``prompts[i]`` followed by ``responses[i]``.

    Raises:
        ValueError: ``prompts`` and ``responses`` differ in length, or are empty.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"pack_pairs: need as many responses as prompts (>= 1), got {len(prompts)} and {len(responses)}")
    M = len(prompts)
    P, R = max(len(p) for p in prompts), max(max(len(r) for r in responses), 1)
    prompt_ids = torch.full((M, P), pad_id, dtype=torch.long)
    response_ids = torch.full((M, R), pad_id, dtype=torch.long)
    response_mask = torch.zeros((M, R), dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_ids[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
        response_ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        response_mask[i, : len(r)] = True
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    return pack_rows(prompt_ids, lengths, response_ids, response_mask, pad_id)


def pack_prompts(prompts: Sequence[Sequence[int]], pad_id: int) -> Rows:
    """Prompt-only rows (for bootstrap values): no response tokens, R = 1 masked-out column."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    S = int(lengths.max())
    ids = torch.full((len(prompts), S), pad_id, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    attention = (torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)).long()
    R = 1
    return Rows(ids, attention, lengths, torch.full((len(prompts), R), pad_id), torch.zeros(len(prompts), R,
                                                                                            dtype=torch.bool))


def response_positions(rows: Rows) -> torch.Tensor:
    """[M, R] long: the sequence position whose output belongs to response token k (p - 1 + k),
    clamped into the row so that padded response slots gather a valid (ignored) position."""
    R = rows.response_ids.shape[1]
    idx = rows.prompt_lengths.unsqueeze(1) - 1 + torch.arange(R).unsqueeze(0)
    return idx.clamp(max=rows.input_ids.shape[1] - 1)


def gather_response(x: torch.Tensor, rows: Rows, offset: int = 0) -> torch.Tensor:
    """Gather per-position outputs ``x`` ([M, S] or [M, S, V]) at the response positions -> [M, R(, V)].

    ``offset``: the sequence position of ``x``'s first column (``x`` covers columns ``offset..`` only,
    as logits computed on :func:`response_window` do).
    """
    idx = (response_positions(rows) - offset).to(x.device)
    if x.dim() == 2:
        return x.gather(1, idx)
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def response_window(rows: Rows) -> tuple[int, int]:
    """The column range ``[lo, hi)`` holding every position :func:`response_positions` gathers.

    Rows are right-padded prompt + response, so the response positions of all rows lie between
    ``min(prompt_lengths) - 1`` and the last (clamped) gathered position; the LM head is needed
    only there.
    """
    idx = response_positions(rows)
    return int(idx.min()), int(idx.max()) + 1


def _accepts_logits_to_keep(model: Callable) -> bool:
    """Whether the causal LM inside ``model`` (a DeepSpeed engine and/or peft model around a
    transformers model) takes ``logits_to_keep`` in its forward."""
    module = getattr(model, "module", model)
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    return _forward_takes_logits_to_keep(type(base))


@functools.lru_cache(maxsize=None)
def _forward_takes_logits_to_keep(cls: type) -> bool:
    return "logits_to_keep" in inspect.signature(cls.forward).parameters


def policy_outputs(model: Callable, rows: Rows, *, with_entropy: bool = False,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (and optionally entropies) of the response tokens under ``model``.

    The LM head runs only on the columns of :func:`response_window` (transformers'
    ``logits_to_keep`` with those sequence indices), not on every position: [M, W, V] logits
    instead of [M, S, V], W = the window's width. A model whose forward has no ``logits_to_keep``
    computes all positions' logits, as before.

    Args:
        model: a causal LM (or a DeepSpeed engine / peft model wrapping one) returning ``.logits``.
    Returns:
        logprobs [M, R] float32 and entropy [M, R] (or None); padded slots hold arbitrary values.
    """
    dev = next(iter(_parameters(model))).device
    lo, hi = response_window(rows)
    kwargs = {}
    if _accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = torch.arange(lo, hi, device=dev)
    else:
        lo = 0
    logits = forward_rows(model, rows, dev, **kwargs).logits
    resp_logits = gather_response(logits, rows, offset=lo).float()
    if temperature != 1.0:
        resp_logits = resp_logits / temperature
    logprobs = logprobs_from_logits(resp_logits, rows.response_ids.to(dev))
    entropy = entropy_from_logits(resp_logits) if with_entropy else None
    return logprobs, entropy


def critic_outputs(critic: Callable, rows: Rows) -> torch.Tensor:
    """Values V_k [M, R] float32 of the response positions under a token-classification critic."""
    dev = next(iter(_parameters(critic))).device
    out = forward_rows(critic, rows, dev).logits
    return gather_response(out.squeeze(-1).float(), rows)


def forward_rows(model: Callable, rows: Rows, dev: torch.device, **kwargs: Any) -> Any:
    """``model``'s forward over ``rows`` on ``dev`` (every position's output; ``kwargs`` go to the model):
    from their frozen hidden states when ``model`` shares them (:func:`verlog.frozen_base.forward`), from
    the token ids otherwise; the rows' images go with them."""
    if rows.images is not None:
        kwargs.update(vision_kwargs(rows.images, dev, next(iter(_parameters(model))).dtype))
    return frozen_base.forward(model, rows.input_ids.to(dev), rows.attention_mask.to(dev), hidden=rows.hidden,
                               hidden_split=rows.hidden_split, **kwargs)


def with_frozen_hidden(model: Callable, rows: Rows, micro_batch_size: int) -> Rows:
    """``rows`` carrying the frozen hidden states of ``model`` (:func:`verlog.frozen_base.frozen_hidden`),
    computed in length-sorted micro-batches of ``micro_batch_size`` rows; kept on the CPU.

    Every model whose frozen base is ``model``'s (the same split and frozen weights) then runs only its
    top layers on these rows, here and in the update epochs.
    """
    split = frozen_base.frozen_below(model)
    M, S = rows.input_ids.shape
    hidden: torch.Tensor | None = None
    order = torch.argsort(rows.attention_mask.sum(-1), descending=True)
    for start in range(0, M, micro_batch_size):
        idx = order[start:start + micro_batch_size]
        part = rows.select(idx)
        h = frozen_base.frozen_hidden(model, part.input_ids, part.attention_mask).cpu()
        if hidden is None:
            hidden = torch.zeros(M, S, h.shape[-1], dtype=h.dtype)
        hidden[idx, : h.shape[1]] = h
    return replace(rows, hidden=hidden, hidden_split=split)


def _parameters(model: Callable):
    module = getattr(model, "module", model)
    return module.parameters()


def batched(fn: Callable[[Rows], torch.Tensor], rows: Rows, micro_batch_size: int) -> torch.Tensor:
    """Apply ``fn`` to length-sorted micro-batches under ``torch.no_grad`` and restore row order."""
    order = torch.argsort(rows.attention_mask.sum(-1), descending=True)
    outs = []
    with torch.no_grad():
        for start in range(0, len(rows), micro_batch_size):
            outs.append(fn(rows.select(order[start:start + micro_batch_size])).cpu())
    out = torch.cat(outs)
    result = torch.empty_like(out)
    result[order] = out
    return result


@dataclass(frozen=True)
class Scores:
    """What scoring computed for a batch of T x N turns (R response-token slots).

    Attributes:
        old_logprobs: [T, N, R] float32, the actor's logprobs of the response tokens before the
            update (zero on padding turns).
        ref_logprobs: [T, N, R] float32, the reference policy's, or None without a KL term.
        values: [T, N, R] float32, V_k of the critic (``values[..., 0]`` is the turn value), or None
            for algorithms without a critic.
        bootstrap_values: [T, N] float32, the critic's value of each bootstrap prompt
            (``batch.bootstrap_prompts``), 0 elsewhere; None without a critic.
    """

    old_logprobs: torch.Tensor
    ref_logprobs: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None
    bootstrap_values: Optional[torch.Tensor] = None


def turn_positions(batch: TurnBatch) -> torch.Tensor:
    """long [M]: flat positions ``t * N + n`` of the batch's real turns (the training rows, in order)."""
    return batch.turns.flatten().nonzero().squeeze(1)


def turn_rows(batch: TurnBatch) -> Rows:
    """The batch's real turns as rows (:func:`turn_positions` order)."""
    pos = turn_positions(batch)
    flat = lambda x: x.flatten(0, 1)[pos]  # noqa: E731
    rows = pack_rows(flat(batch.prompt_ids), flat(batch.prompt_lengths), flat(batch.response_ids),
                     flat(batch.response_mask), batch.pad_id)
    if batch.images:
        rows.images = [batch.images.get(divmod(p, batch.num_envs)) for p in pos.tolist()]
    return rows


def score_batch(batch: TurnBatch, rows: Rows, *, actor: Any, micro_batch_size: int,
                reference: Callable[[Rows, float], torch.Tensor] | None = None, critic: Any = None,
                temperature: float = 1.0) -> Scores:
    """Old logprobs, reference logprobs, values and bootstrap values of a batch, without gradients.

    Args:
        batch: the collected batch; ``rows``: :func:`turn_rows` of it.
        actor: the actor (a DeepSpeed engine or a causal LM); put in eval mode.
        micro_batch_size: rows per forward pass.
        reference: (rows, temperature) -> reference logprobs [M, R], or None when no KL term is used.
        critic: the critic (put in eval mode), or None for algorithms without one.
        temperature: the policy's temperature: the actor's and the reference's logprobs are those of
            softmax(logits / temperature), the distribution the batch was sampled from.

    Returns:
        :class:`Scores`; padding turns hold zeros.
    """
    T, N = batch.num_turns, batch.num_envs
    pos = turn_positions(batch)
    shape = batch.response_mask.shape

    def scatter(values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(T * N, shape[2], dtype=values.dtype)
        out[pos] = values
        return out.view(shape)

    actor.eval()
    old = scatter(batched(lambda r: policy_outputs(actor, r, temperature=temperature)[0], rows, micro_batch_size))
    ref = None
    if reference is not None:
        ref = scatter(batched(lambda r: reference(r, temperature), rows, micro_batch_size))
    if critic is None:
        return Scores(old, ref)
    critic.eval()
    values = scatter(batched(lambda r: critic_outputs(critic, r), rows, micro_batch_size))
    bootstrap = torch.zeros(T, N)
    if batch.bootstrap_prompts:
        keys = sorted(batch.bootstrap_prompts)
        prompt_rows = pack_prompts([batch.bootstrap_prompts[k] for k in keys], batch.pad_id)
        if batch.bootstrap_images:
            prompt_rows.images = [batch.bootstrap_images.get(k) for k in keys]
        boot = batched(lambda r: critic_outputs(critic, r)[:, 0:1], prompt_rows, micro_batch_size).squeeze(1)
        for (t, n), v in zip(keys, boot.tolist()):
            bootstrap[t, n] = v
    return Scores(old, ref, values, bootstrap)
