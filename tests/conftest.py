"""Session-wide test ordering.

The tests of ``test_engines.py`` build vLLM engines in the pytest process. vLLM changes process-wide
state that outlives its engines: it initialises torch.distributed without a launcher's LOCAL_RANK,
after which a DeepSpeed engine built in the same process stops with "DeepSpeed requires the
LOCAL_RANK environment variable". A training run never meets this (the trainer sets up its own
process group before it builds a vLLM engine), so those tests run last, after every test that
trains in-process.
"""

from __future__ import annotations

LAST_MODULES = ("test_engines.py",)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name in LAST_MODULES)  # stable: keeps the order otherwise
