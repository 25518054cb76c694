"""Random-number-generator states for exact resume, written without pickle.

Per rank, a checkpoint holds ``rng_rank<r>.json`` (python ``random`` and numpy's global state) and
``rng_rank<r>.safetensors`` (torch's CPU state, every CUDA device's state when there is one, and any
named ``torch.Generator`` such as the trainer's update stream and the rollout engine's sampling
stream). Loading reads JSON and safetensors only.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

__all__ = ["save_rng_states", "load_rng_states"]


def save_rng_states(directory: Path, rank: int, generators: dict[str, torch.Generator]) -> None:
    """Write this process's global RNG states and ``generators``' states into ``directory``.

    Args:
        directory: the (temporary) checkpoint directory.
        rank: this process's rank (part of the file names).
        generators: name -> CPU ``torch.Generator`` (names must be plain identifiers).
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    doc = {"python": [version, list(internal), gauss],
           "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    (directory / f"rng_rank{rank}.json").write_text(json.dumps(doc))
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = state
    for key, gen in generators.items():
        tensors[f"gen_{key}"] = gen.get_state()
    save_file(tensors, str(directory / f"rng_rank{rank}.safetensors"))


def load_rng_states(directory: Path, rank: int, generators: dict[str, torch.Generator]) -> None:
    """Restore what :func:`save_rng_states` wrote for ``rank`` (global RNGs and ``generators``).

    Raises:
        FileNotFoundError: the checkpoint has no RNG files for this rank (e.g. another world size).
        KeyError: a generator named here was not saved.
    """
    path = directory / f"rng_rank{rank}.json"
    if not path.is_file():
        raise FileNotFoundError(f"resume: {path} is missing (was the checkpoint written with fewer ranks?)")
    doc = json.loads(path.read_text())
    version, internal, gauss = doc["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = doc["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    tensors = load_file(str(directory / f"rng_rank{rank}.safetensors"))
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("torch_cuda_")),
                                           key=lambda k: int(k.rsplit("_", 1)[1]))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    for key, gen in generators.items():
        gen.set_state(tensors[f"gen_{key}"])
