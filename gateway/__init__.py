"""Tether's HTTP gateway: aiohttp, stateless; never runs handlers."""
