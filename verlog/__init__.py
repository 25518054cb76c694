"""Verlog: turn-level PPO with dual-discount GAE and a critic for long-horizon LLM agents."""

__version__ = "0.1.0"
