"""Turn rows for forward passes: pack prompt + response, gather per-response-token outputs.

Each turn becomes one right-padded row ``prompt ids + response ids``. For response token k of a
row whose prompt has p tokens, the model output at position ``p - 1 + k`` is both the logit
vector that predicts token k and the critic's value V_k of the state before token k is generated
(so V_0, at the last prompt token, is the turn value). Right padding keeps positions 0..S-1 natural,
so no position ids are needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from verlog.algos.logprobs import entropy_from_logits, logprobs_from_logits


@dataclass
class Rows:
    """A set of turns as flat rows.

    Attributes:
        input_ids: [M, S] long, prompt then response, right-padded.
        attention_mask: [M, S] long, 1 on real tokens.
        prompt_lengths: [M] long.
        response_ids: [M, R] long.
        response_mask: [M, R] bool.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_lengths: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, index: torch.Tensor) -> "Rows":
        """Rows at ``index`` ([K] long), trimmed to their own longest sequence."""
        mask = self.attention_mask[index]
        width = int(mask.sum(-1).max())
        return Rows(self.input_ids[index, :width], mask[:, :width], self.prompt_lengths[index],
                    self.response_ids[index], self.response_mask[index])


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


def gather_response(x: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Gather per-position outputs ``x`` ([M, S] or [M, S, V]) at the response positions -> [M, R(, V)]."""
    idx = response_positions(rows).to(x.device)
    if x.dim() == 2:
        return x.gather(1, idx)
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def policy_outputs(model: Callable, rows: Rows, *, with_entropy: bool = False,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (and optionally entropies) of the response tokens under ``model``.

    Args:
        model: a causal LM (or a DeepSpeed engine wrapping one) returning ``.logits`` [M, S, V].
    Returns:
        logprobs [M, R] float32 and entropy [M, R] (or None); padded slots hold arbitrary values.
    """
    dev = next(iter(_parameters(model))).device
    logits = model(input_ids=rows.input_ids.to(dev), attention_mask=rows.attention_mask.to(dev)).logits
    resp_logits = gather_response(logits, rows).float()
    if temperature != 1.0:
        resp_logits = resp_logits / temperature
    logprobs = logprobs_from_logits(resp_logits, rows.response_ids.to(dev))
    entropy = entropy_from_logits(resp_logits) if with_entropy else None
    return logprobs, entropy


def critic_outputs(critic: Callable, rows: Rows) -> torch.Tensor:
    """Values V_k [M, R] float32 of the response positions under a token-classification critic."""
    dev = next(iter(_parameters(critic))).device
    out = critic(input_ids=rows.input_ids.to(dev), attention_mask=rows.attention_mask.to(dev)).logits
    return gather_response(out.squeeze(-1).float(), rows)


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
