"""The command-line tools' thread settings."""

import os

import pytest


@pytest.mark.parametrize("preset, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_threads_make_openmp_wait_passively_unless_the_caller_chose(monkeypatch, preset, expected):
    """A spinning OpenMP barrier beside another busy process made the tiny recipe ~10x slower at 2 threads."""
    import torch

    import verlog.cli

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    if preset is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", preset)
    before = torch.get_num_threads()
    try:
        verlog.cli._use_threads(1)
    finally:
        torch.set_num_threads(before)
    assert os.environ["OMP_WAIT_POLICY"] == expected
    assert os.environ["OMP_NUM_THREADS"] == "1"
