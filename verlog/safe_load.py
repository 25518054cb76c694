"""Reading DeepSpeed's ``.pt`` checkpoint files without unpickling arbitrary objects.

DeepSpeed writes its engine and optimizer states with ``torch.save`` and reads them back with
``torch.load(weights_only=False)``, which runs whatever a crafted file's pickle asks for. Here every
such file is read with ``torch.load(weights_only=True)``: only tensors, containers, numbers and
strings, plus the three small DeepSpeed types its ZeRO optimizer states hold
(:data:`DEEPSPEED_STATE_TYPES`), are built; any other object makes the load fail before anything
of it runs. :func:`weights_only_loads` puts that reader in place of a DeepSpeed engine's own while
it loads a checkpoint.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

__all__ = ["DEEPSPEED_STATE_TYPES", "UnsafeCheckpointFile", "load_torch_state", "weights_only_loads"]

#: Dotted names of the only non-builtin types allowed in a DeepSpeed state file: ZeRO stages 1-3 save
#: the stage as an enum, the loss scaler object, and (stages 1-2) the fragment addresses of the
#: partitioned parameters. Each is a plain data holder.
DEEPSPEED_STATE_TYPES = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
)


class UnsafeCheckpointFile(ValueError):
    """A ``.pt`` file that asks to build an object outside the allowed types (it was not run)."""


def _allowed_types() -> list[type]:
    import importlib

    types = []
    for dotted in DEEPSPEED_STATE_TYPES:
        module, _, name = dotted.rpartition(".")
        types.append(getattr(importlib.import_module(module), name))
    return types


def load_torch_state(path: str | Path, map_location: Any = "cpu") -> Any:
    """Read a ``torch.save`` file with ``weights_only=True`` and the DeepSpeed types allowed.

    Files in torch's zip format are memory-mapped (the pickle is read in full, the tensor data lazily).

    Args:
        path: the file.
        map_location: as for ``torch.load`` (default: the CPU).

    Returns:
        The saved object (dicts, lists, tensors, numbers, strings, the allowed DeepSpeed types).

    Raises:
        UnsafeCheckpointFile: the file asks for another global (a payload; nothing of it ran).
        OSError, RuntimeError, EOFError, ValueError: the file is missing, truncated or not a torch file.
    """
    mmap = zipfile.is_zipfile(path)
    try:
        with torch.serialization.safe_globals(_allowed_types()):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        found = re.search(r"unsupported (GLOBAL \S+|\w+ \S+)", str(err), flags=re.IGNORECASE)
        what = found.group(1) if found else str(err).strip().splitlines()[0]
        raise UnsafeCheckpointFile(f"{Path(path).name} asks to build an object that is not allowed ({what}); "
                                   "refused, nothing of it was run") from None


class _WeightsOnlyEngine:
    """A DeepSpeed checkpoint engine whose ``load`` is :func:`load_torch_state`; all else is the wrapped engine's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_torch_state(path, map_location=map_location)


@contextmanager
def weights_only_loads(engine: Any) -> Iterator[None]:
    """Within the block, ``engine.load_checkpoint`` reads its files with :func:`load_torch_state`.

    Args:
        engine: a DeepSpeed engine (its ``checkpoint_engine`` is wrapped, then put back).
    """
    inner = engine.checkpoint_engine
    engine.checkpoint_engine = _WeightsOnlyEngine(inner)
    try:
        yield
    finally:
        engine.checkpoint_engine = inner
