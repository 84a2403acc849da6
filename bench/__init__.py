"""Tether's benchmark suite: ``python -m bench [scenario ...] [--quick]`` (see bench/README.md)."""
