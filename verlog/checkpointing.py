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
checkpoint or the new one. With ``checkpoint_keep = k > 0`` the older complete checkpoints beyond the
newest k are deleted only then, once the new one is complete (:func:`prune_checkpoints`): the one a run
resumed from stays until a newer one exists. Nothing in a checkpoint is unpickled when it is read back.

With LoRA (``model.lora_rank > 0``) ``actor/`` and ``critic/`` hold peft adapters
(``adapter_model.safetensors``; ``adapter_config.json`` names the base directory), not full models.
Such an ``actor/`` loads as a model in three ways: ``transformers.AutoModelForCausalLM.from_pretrained``
(its peft integration loads the base and attaches the adapter), :func:`verlog.models.load_actor` (the
adapter merged into the base; ``.save_pretrained(out)`` exports a full model directory), and
:class:`verlog.rollout.vllm.VLLMEngine` (merges it into a temporary full directory and serves that).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch

from verlog import distributed as D
from verlog.resume import save_rng_states

__all__ = ["CHECKPOINT_MARKER", "checkpoint_dir", "complete_checkpoints", "newest_checkpoint", "prune_checkpoints",
           "read_rank_state", "read_trainer_state", "save_checkpoint"]

CHECKPOINT_MARKER = "COMPLETE"


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    """``<run_dir>/checkpoints/iter_<iteration, 6 digits>``."""
    return run_dir / "checkpoints" / f"iter_{iteration:06d}"


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoint directories of a run, oldest first (a half-written one has no marker)."""
    ckpts = sorted((run_dir / "checkpoints").glob("iter_*"))
    # iter_<k>.tmp is a checkpoint being written (a kill may even leave one with its marker).
    return [c for c in ckpts if (c / CHECKPOINT_MARKER).is_file() and not c.name.endswith(".tmp")]


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
    if D.is_main():
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state))
    D.barrier()  # every rank's own state files are written
    if D.is_main():
        (tmp / CHECKPOINT_MARKER).write_text("ok\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        prune_checkpoints(run_dir, keep, protect=final)
    D.barrier()
    return final


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint."""
    return json.loads((ckpt / "trainer_state.json").read_text())


def read_rank_state(ckpt: Path, rank: int) -> dict[str, Any]:
    """``state_rank<rank>.json`` of a checkpoint.

    Raises:
        FileNotFoundError: the checkpoint holds no state for this rank (another world size, or a
            checkpoint of a Verlog without exact resume).
    """
    path = ckpt / f"state_rank{rank}.json"
    if not path.is_file():
        raise FileNotFoundError(f"resume: {path} is missing (a checkpoint of another world size "
                                "or of a Verlog without exact resume)")
    return json.loads(path.read_text())
