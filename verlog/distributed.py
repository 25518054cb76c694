"""DeepSpeed set-up: process group, ZeRO engine configs, rank helpers, reductions over ranks,
parameter gathering.

One process (the CPU default) is a world of size 1 on loopback; under ``deepspeed`` or
``torchrun`` the launcher's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* variables are used as they are.
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed() -> None:
    """Initialise torch.distributed through DeepSpeed (gloo on CPU, nccl on GPU), once.

    Without a launcher this sets up a single-process world on 127.0.0.1 with a free port, so that
    ``deepspeed.initialize`` never falls back to MPI discovery.
    """
    # Fill in what a launcher would have set, key by key, also when a process group already exists
    # (DeepSpeed reads LOCAL_RANK from the environment; an in-process vLLM engine, or a caller that
    # cleaned its environment, may leave a group without it).
    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        initialized = dist.is_available() and dist.is_initialized()
        os.environ.setdefault("RANK", str(dist.get_rank()) if initialized else "0")
        os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()) if initialized else "1")
        os.environ.setdefault("LOCAL_RANK", os.environ["RANK"] if os.environ["WORLD_SIZE"] == "1" else "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    skip_cpu_shm_op()  # before DeepSpeed builds its comm backend, also on a group made by someone else
    if dist.is_available() and dist.is_initialized():
        return
    import deepspeed
    from deepspeed.utils import groups

    # A world torn down behind DeepSpeed's back (an in-process vLLM engine destroys the groups it
    # used) leaves DeepSpeed caching groups of the old world; an engine built in the new one would
    # broadcast over them and fail ("Group ... is not registered"). They died with that world.
    release = getattr(groups, "_release_process_group_references", None)
    if release is not None:
        release(None)
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo",
                               verbose=False)


#: DeepSpeed's shared-memory all-reduce op on its CPU accelerator (a C++ op compiled on first use).
CPU_SHM_OP = "deepspeed_shm_comm"


def skip_cpu_shm_op() -> None:
    """Keep DeepSpeed from compiling its CPU shared-memory comm op; no-op unless its accelerator is the CPU.

    On the CPU accelerator every DeepSpeed comm backend (``deepspeed.comm.torch.TorchBackend``, made by
    ``deepspeed.init_distributed`` and again by ``deepspeed.initialize`` when none exists) JIT-compiles
    ``deepspeed_shm_comm`` when DeepSpeed's op table calls it compatible: minutes of C++ build, a compiler, a
    build per virtualenv, and a lock file in torch's extensions cache that, left by a killed build, makes
    every later run wait on it forever. The op serves only ``inference_all_reduce`` (tensor-parallel
    inference); training's collectives go through torch.distributed (gloo on the CPU) either way. Marking the
    op incompatible in DeepSpeed's op table (``deepspeed.ops.__compatible_ops__``, one dict kept for the
    process) makes the backend skip it, as it does on platforms without the op.
    """
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":
        deepspeed.ops.__compatible_ops__[CPU_SHM_OP] = False


def rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Number of data-parallel processes (1 when not distributed)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    """True on rank 0, which alone writes logs and checkpoints."""
    return rank() == 0


def device() -> torch.device:
    """This rank's device: its CUDA device when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def require_gpus(count: int, what: str) -> None:
    """Stop before any work when this node has fewer than ``count`` CUDA GPUs.

    Raises:
        RuntimeError: one line naming ``what`` (e.g. the recipe), the GPUs it needs and those found.
    """
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < count:
        raise RuntimeError(f"{what} needs {count} CUDA GPU{'s' if count != 1 else ''} per node (see the recipe's "
                           f"header for GPU memory); this machine has {found}")


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over data-parallel ranks (identity in a world of one). Returns a new tensor."""
    out = x.clone()
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def all_reduce_min(x: torch.Tensor) -> torch.Tensor:
    """Element-wise minimum over data-parallel ranks (identity in a world of one). Returns a new tensor."""
    out = x.clone()
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MIN)
    return out


def all_reduce_max(x: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over data-parallel ranks (identity in a world of one). Returns a new tensor."""
    out = x.clone()
    if world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out


def sum_over_ranks(x: float) -> float:
    """A Python number summed over data-parallel ranks (as a float tensor on this rank's device)."""
    return float(all_reduce_sum(torch.tensor([float(x)], device=device())).item())


def min_over_ranks(x: float) -> float:
    """The smallest of a Python number over data-parallel ranks."""
    return float(all_reduce_min(torch.tensor([float(x)], device=device())).item())


def max_over_ranks(x: float) -> float:
    """The largest of a Python number over data-parallel ranks."""
    return float(all_reduce_max(torch.tensor([float(x)], device=device())).item())


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on at least one rank (every rank gets the same answer)."""
    return sum_over_ranks(1.0 if flag else 0.0) > 0


def barrier() -> None:
    """Wait for every rank (nothing to wait for in a world of one)."""
    if world_size() > 1:
        dist.barrier()


def ds_config(*, zero_stage: int, micro_batch_size: int, grad_accum_steps: int, max_grad_norm: float,
              bf16: bool, offload_optimizer: str = "none", offload_param: str = "none") -> dict[str, Any]:
    """A DeepSpeed config dict for one engine (actor or critic).

    ``train_batch_size`` = micro_batch_size x grad_accum_steps x world_size, as DeepSpeed requires.
    ``offload_optimizer`` / ``offload_param`` (``"none"`` or ``"cpu"``) become ZeRO's ``offload_optimizer`` /
    ``offload_param`` sections with pinned host memory (Ren et al. 2021, ZeRO-Offload; Rajbhandari et al.
    2021, ZeRO-Infinity). With the optimizer offloaded, DeepSpeed is allowed to step the run's own torch
    AdamW on the host copies (``zero_force_ds_cpu_optimizer: false``) instead of insisting on its
    JIT-compiled CPU Adam.
    """
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum_steps,
        "train_batch_size": micro_batch_size * grad_accum_steps * world_size(),
        "gradient_clipping": max_grad_norm,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    for section, device in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
        if device != "none":
            cfg["zero_optimization"][section] = {"device": device, "pin_memory": True}
    if offload_optimizer != "none":
        cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def make_engine(model: torch.nn.Module, *, lr: float, weight_decay: float, config: dict[str, Any]) -> Any:
    """Wrap a model in a DeepSpeed engine with a torch AdamW (no JIT-built optimizer ops) over the
    parameters that require gradients.

    The AdamW is torch's fused kernel (one pass over each flat tensor, ~5x faster on CPU than the
    per-element loop for a 135M-parameter model: its step is a fixed cost of every update).

    Returns:
        ``deepspeed.DeepSpeedEngine``; ``engine.module`` is the Hugging Face model.
    """
    import deepspeed

    skip_cpu_shm_op()  # deepspeed.initialize makes a comm backend when none exists yet
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


@contextmanager
def _gathered(params: list[torch.nn.Parameter], zero3: bool) -> Iterator[None]:
    if not zero3:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield


def gathered_named_parameters(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for every parameter, one submodule at a time.

    Under ZeRO-3 each submodule's partitioned parameters are gathered only while they are yielded
    (detached copies), so the whole model is never materialised twice; otherwise the parameters
    are yielded as they are (detached).
    """
    zero3 = any(hasattr(p, "ds_id") for p in module.parameters())
    seen: set[int] = set()
    for prefix, sub in module.named_modules():
        own = [(n, p) for n, p in sub.named_parameters(recurse=False) if id(p) not in seen]
        if not own:
            continue
        with _gathered([p for _, p in own], zero3):
            for name, p in own:
                seen.add(id(p))
                full = f"{prefix}.{name}" if prefix else name
                yield full, (p.detach().clone() if zero3 else p.detach())
