"""An engine built after the process group was torn down and made anew in the same process (as an
in-process vLLM engine does to the groups it used) must not reuse DeepSpeed's groups of the old world."""

import torch
import torch.distributed as dist

from verlog import distributed as D


def _engine():
    model = torch.nn.Linear(4, 1)
    config = D.ds_config(zero_stage=2, micro_batch_size=1, grad_accum_steps=1, max_grad_norm=1.0, bf16=False)
    return D.make_engine(model, lr=1e-3, weight_decay=0.0, config=config)


def test_engine_builds_in_a_world_made_anew():
    D.init_distributed()
    _engine()
    dist.destroy_process_group()  # behind DeepSpeed's back, as vLLM's shutdown does
    D.init_distributed()
    engine = _engine()
    loss = engine(torch.ones(1, 4)).sum()
    engine.backward(loss)
    engine.step()
    assert dist.is_initialized()
