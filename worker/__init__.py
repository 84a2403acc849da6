"""Tether's worker: Dramatiq processes that run invocations and reap dead attempts."""
