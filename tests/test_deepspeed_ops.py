"""DeepSpeed on the CPU builds no C++ op: a stale build lock in torch's extensions cache cannot stall a run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from verlog.distributed import CPU_SHM_OP

# The DeepSpeed set-up of a training process: the process group, then an engine with one optimizer step.
ENGINE_STEP = textwrap.dedent("""
    import torch
    from verlog import distributed as D

    D.init_distributed()
    model = torch.nn.Linear(4, 1)
    config = D.ds_config(zero_stage=0, micro_batch_size=2, grad_accum_steps=1, max_grad_norm=1.0, bf16=False)
    engine = D.make_engine(model, lr=1e-2, weight_decay=0.0, config=config)
    loss = engine(torch.ones(2, 4)).pow(2).mean()
    engine.backward(loss)
    engine.step()
    print("engine stepped", flush=True)
""")


def test_stale_extension_lock_does_not_stall_deepspeed_setup(tmp_path):
    # What a run killed while compiling the op leaves behind: torch's FileBaton lock in the op's build dir.
    extensions = tmp_path / "torch_extensions"
    lock = extensions / CPU_SHM_OP / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", ENGINE_STEP], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "engine stepped" in proc.stdout
    assert "built successfully" not in proc.stdout + proc.stderr
    # nothing was compiled or even looked for: the cache holds only the stale lock
    assert sorted(p.relative_to(extensions).as_posix() for p in extensions.rglob("*")) == [CPU_SHM_OP,
                                                                                            f"{CPU_SHM_OP}/lock"]
