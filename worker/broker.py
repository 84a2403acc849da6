"""The worker processes' Dramatiq broker: the one module-level global in Tether.

Dramatiq binds actors to a process-global broker when ``@actor`` runs, so it must exist at
import time; it is built here, from the settings, and nowhere else.
"""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, ShutdownNotifications

from tether.settings import load_settings
from tether.worker.dramatiq_redis import build_broker
from tether.worker.host import NodeHost

settings = load_settings()
broker = build_broker(settings.redis_url)
# Retries and TimeLimit are wrong for agent runs: only the reaper makes new attempts, and a run
# takes as long as it takes. Keep the rest of Dramatiq's defaults.
for middleware in list(broker.middleware):
    if not isinstance(middleware, AgeLimit | Callbacks | Pipelines | ShutdownNotifications):
        broker.middleware.remove(middleware)
host = NodeHost(settings)
broker.add_middleware(host)
dramatiq.set_broker(broker)
