"""Checkpoints of a training run: written atomically, found again for resume.

A checkpoint is a directory ``<run_dir>/checkpoints/iter_<k>/`` (k = iterations done) holding

==========================  ==========================================================================
entry                       what it is
==========================  ==========================================================================
``actor/``, ``critic/``     complete Hugging Face model directories (ZeRO-3 parameters gathered), with
                            the tokenizer; ``critic/`` only for algorithms that train one
``ds/``                     the DeepSpeed engines' own checkpoints (optimizer state, trained weights; a
                            LoRA model's frozen base weights are left out: they are the base model's)
``trainer_state.json``      iteration, world size, evaluation results so far, the config as a dict
``state_rank<r>.json``      each rank's collector state, counters (:class:`~verlog.trainer.Trainer`)
``rng_rank<r>.*``           each rank's random states (:mod:`verlog.resume`)
``COMPLETE``                written last: a directory without it is unfinished and never resumed
==========================  ==========================================================================

It is written aside as ``iter_<k>.tmp`` and renamed when complete, so a kill leaves either the old
checkpoint or the new one. When ``iter_<k>`` already exists (a resumed run that writes iteration k
again), it is first renamed ``iter_<k>.old``, the new one renamed into place, and only then the old
one deleted: a kill between the two renames leaves ``iter_<k>.old``, which counts as iteration k's
checkpoint while no complete ``iter_<k>`` exists. With ``checkpoint_keep = k > 0`` the older complete checkpoints beyond the
newest k are deleted only then, once the new one is complete (:func:`prune_checkpoints`): the one a run
resumed from stays until a newer one exists. Nothing in a checkpoint is unpickled when it is read back:
DeepSpeed's ``.pt`` files are read with ``torch.load(weights_only=True)`` (:mod:`verlog.safe_load`).

Resume validates before it uses anything (:func:`select_checkpoint`): every file this rank will read
is opened and parsed (:func:`checkpoint_problem`), newest checkpoint first; a damaged one is passed
over with one line, and the newest that validates on every rank is used.

With LoRA (``model.lora_rank > 0``) ``actor/`` and ``critic/`` hold peft adapters
(``adapter_model.safetensors``; ``adapter_config.json`` names the base directory), not full models.
Such an ``actor/`` loads as a model in three ways: ``transformers.AutoModelForCausalLM.from_pretrained``
(its peft integration loads the base and attaches the adapter), :func:`verlog.models.load_actor` (the
adapter merged into the base; ``.save_pretrained(out)`` exports a full model directory), and
:class:`verlog.rollout.vllm.VLLMEngine` (merges it into a temporary full directory and serves that).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from safetensors import SafetensorError, safe_open

from verlog import distributed as D
from verlog.resume import read_rng_states, save_rng_states
from verlog.safe_load import UnsafeCheckpointFile, load_torch_state
from verlog.vision import copy_image_processor

__all__ = ["CHECKPOINT_MARKER", "trained_iterations", "GENERATOR_NAMES", "CheckpointError", "checkpoint_dir", "checkpoint_problem",
           "complete_checkpoints", "newest_checkpoint", "prune_checkpoints", "read_rank_state", "read_trainer_state",
           "save_checkpoint", "select_checkpoint"]

CHECKPOINT_MARKER = "COMPLETE"
#: ``iter_<k>`` (the checkpoint of k iterations) or ``iter_<k>.old`` (the one it replaces, see above).
_NAME = re.compile(r"iter_(\d+)(\.old)?")
#: The named torch generators every checkpoint holds: the trainer's update stream and the rollout engine's.
GENERATOR_NAMES = ("update", "rollout")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (missing, damaged, unsafe); the message is one line."""


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    """``<run_dir>/checkpoints/iter_<iteration, 6 digits>``."""
    return run_dir / "checkpoints" / f"iter_{iteration:06d}"


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoint directories of a run, one per iteration, oldest first.

    A half-written one has no marker; ``iter_<k>.tmp`` is one being written (a kill may even leave
    one with its marker) and never counts; ``iter_<k>.old`` counts only while no complete
    ``iter_<k>`` exists (a kill while :func:`save_checkpoint` replaced it).
    """
    by_iteration: dict[int, Path] = {}
    for path in sorted((run_dir / "checkpoints").glob("iter_*")):
        match = _NAME.fullmatch(path.name)
        if match is None or not (path / CHECKPOINT_MARKER).is_file():
            continue
        k = int(match.group(1))
        if match.group(2) is None or k not in by_iteration:
            by_iteration[k] = path
    return [by_iteration[k] for k in sorted(by_iteration)]


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    complete = complete_checkpoints(run_dir)
    return complete[-1] if complete else None


def prune_checkpoints(run_dir: Path, keep: int, *, protect: Path | None = None) -> list[Path]:
    """Delete the complete checkpoints of a run older than its newest ``keep`` (``keep = 0``: none).

    Only complete checkpoints are counted and deleted; directories being written (``.tmp``) and
    ``protect`` (the checkpoint just written) are never deleted. The marker goes first, so a kill
    during the deletion leaves an incomplete directory, which resume ignores.

    Returns:
        The deleted directories, oldest first.

    Raises:
        ValueError: ``keep < 0``.
    """
    if keep < 0:
        raise ValueError(f"checkpoint_keep must be >= 0, got {keep}")
    if keep == 0:
        return []
    old = [c for c in complete_checkpoints(run_dir)[:-keep] if protect is None or c.resolve() != protect.resolve()]
    for ckpt in old:
        (ckpt / CHECKPOINT_MARKER).unlink()
        shutil.rmtree(ckpt)
    return old


def save_checkpoint(run_dir: Path, iteration: int, *, engines: Mapping[str, Any], tokenizer: Any,
                    rank_state: dict[str, Any], generators: dict[str, torch.Generator],
                    trainer_state: dict[str, Any], keep: int = 0) -> Path:
    """Write the checkpoint of ``iteration`` (every rank calls this; rank 0 writes the shared files).

    Args:
        run_dir: the run directory.
        iteration: iterations done.
        engines: DeepSpeed engines by name (``actor``, ``critic``); each is saved as a DeepSpeed
            checkpoint under ``ds/<name>`` and as a Hugging Face directory ``<name>/``.
        tokenizer: saved beside each model.
        rank_state: this rank's JSON-serialisable state (``state_rank<r>.json``).
        generators: this rank's named torch generators (saved with the global RNG states).
        trainer_state: rank 0's ``trainer_state.json`` content.
        keep: once the new checkpoint is complete, keep only the newest ``keep`` checkpoints
            (:func:`prune_checkpoints`; 0: keep all).

    Returns:
        The final checkpoint directory.
    """
    final = checkpoint_dir(run_dir, iteration)
    tmp = final.with_name(final.name + ".tmp")
    rank = D.rank()
    if D.is_main():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    D.barrier()
    (tmp / f"state_rank{rank}.json").write_text(json.dumps(rank_state))
    save_rng_states(tmp, rank, generators)
    for name, engine in engines.items():
        # frozen weights (a LoRA model's base) are the base model's, not training state: not copied
        engine.save_checkpoint(str(tmp / "ds"), tag=name, exclude_frozen_parameters=True)
    for name, engine in engines.items():
        state_dict = dict(D.gathered_named_parameters(engine.module))
        if D.is_main():
            engine.module.save_pretrained(tmp / name, state_dict=state_dict)
            tokenizer.save_pretrained(tmp / name)
            copy_image_processor(tokenizer, tmp / name)  # a vision-language model's processor
    if D.is_main():
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state))
    D.barrier()  # every rank's own state files are written
    if D.is_main():
        (tmp / CHECKPOINT_MARKER).write_text("ok\n")
        _replace(final, tmp)
        prune_checkpoints(run_dir, keep, protect=final)
    D.barrier()
    return final


def _replace(final: Path, new: Path) -> None:
    """Rename the complete checkpoint ``new`` to ``final``; at every moment one complete checkpoint
    of that iteration exists under a name :func:`complete_checkpoints` reads."""
    aside = final.with_name(final.name + ".old")
    if (final / CHECKPOINT_MARKER).is_file():
        shutil.rmtree(aside, ignore_errors=True)  # left by an earlier kill; final is the newer one
        final.rename(aside)
    else:
        shutil.rmtree(final, ignore_errors=True)  # unfinished: never counted
    new.rename(final)
    shutil.rmtree(aside, ignore_errors=True)


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint, checked.

    Raises:
        CheckpointError: missing, not JSON, or without an int ``iteration``/``world_size`` and a dict
            ``eval_results`` (one line).
    """
    state = _read_json(ckpt / "trainer_state.json")
    for key, kind in (("iteration", int), ("world_size", int), ("eval_results", dict)):
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise CheckpointError(f"trainer_state.json: {key} is not {kind.__name__}")
    if state["iteration"] < 0:
        raise CheckpointError(f"trainer_state.json: iteration {state['iteration']} < 0")
    return state


def trained_iterations(model_dir: Path) -> int | None:
    """The iterations a checkpoint's ``actor/`` directory was trained through (the ``iteration`` of the
    checkpoint's ``trainer_state.json``), or None for a model that is not a readable checkpoint's actor."""
    if model_dir.name != "actor" or not (model_dir.parent / "trainer_state.json").is_file():
        return None
    try:
        return read_trainer_state(model_dir.parent)["iteration"]
    except CheckpointError:
        return None


def read_rank_state(ckpt: Path, rank: int) -> dict[str, Any]:
    """``state_rank<rank>.json`` of a checkpoint, checked.

    Raises:
        FileNotFoundError: the checkpoint holds no state for this rank (another world size, or a
            checkpoint of a Verlog without exact resume).
        CheckpointError: not JSON, or a key missing or of the wrong type (one line).
    """
    path = ckpt / f"state_rank{rank}.json"
    if not path.is_file():
        raise FileNotFoundError(f"resume: {path} is missing (a checkpoint of another world size "
                                "or of a Verlog without exact resume)")
    state = _read_json(path)
    for key, kind in (("collector", dict), ("recent_success", list), ("turns_done", int), ("skipped_steps", dict)):
        if not isinstance(state.get(key), kind):
            raise CheckpointError(f"{path.name}: {key} is not {kind.__name__}")
    if not isinstance(state.get("recent_success_by_task", {}), dict):  # absent before task mixtures
        raise CheckpointError(f"{path.name}: recent_success_by_task is not dict")
    return state


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{path.name} is missing") from None
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{path.name}: not JSON ({_first_line(err)})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path.name}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _check_model_dir(directory: Path) -> None:
    """A saved Hugging Face model (or peft adapter) directory: its config parses, its safetensors open."""
    if not directory.is_dir():
        raise CheckpointError(f"{directory.name}/ is missing")
    configs = [p for p in (directory / "config.json", directory / "adapter_config.json") if p.is_file()]
    if not configs:
        raise CheckpointError(f"{directory.name}/: no config.json or adapter_config.json")
    for config in configs:
        try:
            _read_json(config)
        except CheckpointError as err:
            raise CheckpointError(f"{directory.name}/{err}") from None
    weights = sorted(directory.glob("*.safetensors"))
    if not weights:
        raise CheckpointError(f"{directory.name}/: no .safetensors weights")
    for path in weights:
        try:
            with safe_open(str(path), framework="pt") as f:  # checks the header against the file size
                for key in f.keys():
                    f.get_slice(key).get_shape()
        except (OSError, SafetensorError, ValueError) as err:
            raise CheckpointError(f"{directory.name}/{path.name}: not a complete safetensors file "
                                  f"({_first_line(err)})") from None


def _deepspeed_files(ds_dir: Path, rank: int) -> list[Path]:
    """The DeepSpeed files of one engine that ``rank`` reads: the shared model states and its own
    partitions (``zero_pp_rank_<r>_...``, with a ``bf16_`` prefix for ZeRO's bf16 optimizer states)."""
    own = f"zero_pp_rank_{rank}_"
    return [p for p in sorted(ds_dir.glob("*.pt")) if "zero_pp_rank_" not in p.name or own in p.name]


def _check_deepspeed_dir(ds_dir: Path, rank: int) -> None:
    files = _deepspeed_files(ds_dir, rank)
    if not any("model_states" in p.name for p in files):
        raise CheckpointError(f"ds/{ds_dir.name}/: no model states for rank {rank}")
    for path in files:
        try:
            state = load_torch_state(path)
        except UnsafeCheckpointFile as err:
            raise CheckpointError(f"ds/{ds_dir.name}/{err}") from None
        except Exception as err:  # a truncated or foreign file fails in many ways; each is one line here
            reason = _first_line(err).split(". ")[0]  # torch appends advice sentences
            raise CheckpointError(f"ds/{ds_dir.name}/{path.name}: {reason}") from None
        if not isinstance(state, dict):
            raise CheckpointError(f"ds/{ds_dir.name}/{path.name}: expected a dict, got {type(state).__name__}")


def checkpoint_problem(ckpt: Path, *, rank: int, world_size: int, engines: Iterable[str]) -> str | None:
    """What keeps ``rank`` from resuming from ``ckpt``, or None when every file it reads is sound.

    Checked, cheapest first: the ``COMPLETE`` marker; ``trainer_state.json`` (and that it was written
    by ``world_size`` ranks); ``state_rank<rank>.json``; the RNG files (each state tried on a scratch
    generator); each engine's model directory (config parses, safetensors headers match the file
    sizes) and its DeepSpeed files (read with ``weights_only=True``: a file that asks for any other
    object is refused without running it). Nothing is changed.

    Args:
        ckpt: a checkpoint directory.
        rank: this process's rank.
        world_size: ranks of this run.
        engines: the engine names the run loads (``actor``, ``critic``).

    Returns:
        One line naming the first bad file and what is wrong, or None.
    """
    try:
        if not (ckpt / CHECKPOINT_MARKER).is_file():
            raise CheckpointError(f"no {CHECKPOINT_MARKER} marker")
        state = read_trainer_state(ckpt)
        if state["world_size"] != world_size:
            raise CheckpointError(f"written by {state['world_size']} rank(s), this run has {world_size}")
        read_rank_state(ckpt, rank)
        read_rng_states(ckpt, rank, GENERATOR_NAMES)
        for name in engines:
            _check_model_dir(ckpt / name)
            _check_deepspeed_dir(ckpt / "ds" / name, rank)
    except (CheckpointError, FileNotFoundError, ValueError) as err:
        return _first_line(err).removeprefix("resume: ")
    return None


def select_checkpoint(run_dir: Path, *, engines: Iterable[str]) -> Path:
    """The newest checkpoint of ``run_dir`` that validates on every rank (:func:`checkpoint_problem`).

    Every rank calls this (the ranks agree on each candidate). When newer checkpoints are passed
    over, rank 0 prints one line naming them and why, and the one resumed from.

    Raises:
        CheckpointError: no complete checkpoint, or none that validates (one line, naming the newest's problem).
    """
    engines = list(engines)
    candidates = complete_checkpoints(run_dir)[::-1]
    if not candidates:
        raise CheckpointError(f"resume: no complete checkpoint under {run_dir / 'checkpoints'}")
    skipped: list[str] = []
    for ckpt in candidates:
        problem = checkpoint_problem(ckpt, rank=D.rank(), world_size=D.world_size(), engines=engines)
        if not D.any_rank(problem is not None):
            if skipped and D.is_main():
                print(f"resume: passed over damaged {'; '.join(skipped)}; resuming from {ckpt.name}", flush=True)
            return ckpt
        skipped.append(f"{ckpt.name} ({problem or 'damaged on another rank'})")
    raise CheckpointError(f"resume: no usable checkpoint under {run_dir / 'checkpoints'}: {'; '.join(skipped)}")
