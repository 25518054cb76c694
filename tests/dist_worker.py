"""Run under a 2-process launcher by test_distributed.py: train, then report a digest of the weights."""

import hashlib
import json
import sys
from pathlib import Path

import torch

from verlog import distributed as D
from verlog.config import load_recipe
from verlog.trainer import Trainer


def main() -> None:
    out_dir = Path(sys.argv[1])
    args = [a for a in sys.argv[2:] if not a.startswith("--local_rank")]
    trainer = Trainer(load_recipe("tiny", args))
    trainer.train()
    digest = hashlib.sha256()
    for name, tensor in D.gathered_named_parameters(trainer.actor.module):
        digest.update(name.encode())
        digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    engine_digest = hashlib.sha256()
    for name, tensor in trainer.engine.model.named_parameters():
        engine_digest.update(name.encode())
        engine_digest.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    report = {"rank": D.rank(), "world": D.world_size(), "actor": digest.hexdigest(),
              "engine": engine_digest.hexdigest(), "turns_per_batch": trainer.turns_per_batch,
              "turns_done": trainer.turns_done}
    (out_dir / f"rank{D.rank()}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
