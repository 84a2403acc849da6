"""The worker processes' Dramatiq broker: the one module-level global in Tether.

Dramatiq binds actors to a process-global broker when ``@actor`` runs, so it must exist at
import time; it is built here, from the settings, and nowhere else.
"""

from __future__ import annotations

import dramatiq

from tether.settings import load_settings
from tether.worker.dramatiq_redis import build_broker
from tether.worker.host import NodeHost

settings = load_settings()
host = NodeHost(settings)
broker = build_broker(settings.redis_url, host)
dramatiq.set_broker(broker)
