"""What every scenario shares: sizes (full and ``--quick``), database and queue probes."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import dramatiq
import psycopg
import redis

from bench.baselines import DISPATCH_LUA
from bench.procs import REDIS_URL, Database
from tether.store.opencounts import recount_statements


@dataclass(frozen=True)
class Sizes:
    process_counts: tuple[int, ...] = (1, 2)
    worker_threads: int = 4
    accept_posts: int = 2000
    accept_warmup: int = 500
    accept_rounds: int = 3
    concurrency: int = 32
    drain_messages: int = 20_000
    e2e_seconds: float = 10.0
    e2e_warmup: float = 2.0
    sync_count: int = 500
    sync_warmup: int = 20
    sync_poll_timeouts_ms: tuple[int, ...] = (100, 1000)
    io_invocations: int = 2000
    io_seconds: float = 2.0
    io_concurrency_setting: int = 2000
    stream_events: int = 10_000
    streams: int = 500
    stream_ticks: int = 10
    stream_interval: float = 1.0
    cost_invocations: int = 2000
    parked_invocations: int = 10_000
    resume_samples: int = 500
    timers: int = 500
    timer_sleep: float = 3.0
    timer_spread: float = 10.0
    peer_posts: int = 2000
    peer_warmup: int = 100
    peer_sync_concurrency: tuple[int, ...] = (1, 32)
    peer_sync_seconds: float = 5.0
    peer_sync_count: int = 2000
    peer_streams: int = 160
    peer_stream_events: int = 20
    peer_stream_concurrency: int = 16
    peer_stream_interval: float = 0.05
    sidebyside_rounds: int = 6
    fanout_connections: tuple[int, ...] = (1000, 2500, 5000, 10_000)
    fanout_ticks: int = 10
    fanout_subscribers: int = 1000
    storm_clients: int = 1000
    storm_rate: int = 1000  # reconnects per second in the paced storm
    storm_seconds: int = 3
    storm_invocations: int = 10
    storm_events: int = 200
    eventlog_invocations: int = 50_000  # x 200 events: the 10 million the issue asks
    eventlog_events_each: int = 200
    eventlog_append: int = 2000
    eventlog_replay: int = 500
    eventlog_rounds: int = 3
    retention_ticks: int = 1200
    retention_tick: float = 0.05
    flood_backlog: int = 50_000
    flood_sleep: float = 0.05
    flood_concurrency: int = 20
    flood_rate: float = 2.0
    flood_window: float = 100.0
    """B posts 200 times at 2/s: a p99 of fewer than 100 samples is only their largest."""
    flood_a_window: float = 30.0  # A alone, before and after (its 50,000 last ~200 s)
    flood_warmup: float = 2.0
    caps_starts: int = 100_000
    caps_tenants: int = 8
    caps_max: int = 6  # each tenant's max_active is drawn from 1..caps_max
    caps_global: int = 24
    backlog_queued: int = 500_000
    backlog_tenants: int = 200
    backlog_dominant: float = 0.8  # the largest tenant's share of the backlog
    backlog_posts: int = 2000
    backlog_rounds: int = 5
    heartbeat_attempts: int = 500
    heartbeat_rows: int = 20_000
    heartbeat_rounds: int = 20
    chatty_invocations: int = 50
    chatty_events: int = 8000  # more than a transaction's 5,000: each goes over two
    chatty_tick: float = 0.01
    statements_batch: int = 16  # about what a burst's group commits batch
    statements_rounds: int = 200
    embedded_batch: int = 30  # what tether dev's gathered accepts and finishes batch in a burst
    embedded_small_batch: int = 13  # what they batched before the flushes gathered
    embedded_rounds: int = 300
    embedded_large_batch: int = 8  # tether dev's batches of 67 kB values (~0.5 MB each)
    embedded_large_rounds: int = 40
    log_rounds: int = 200
    newcomers_listed: int = 256  # the tenants the peer's client cycles through
    newcomers_batch: int = 8
    newcomers_rounds: int = 100
    lending_listed: int = 256
    lending_count: int = 32  # a tokens' claim under that burst started ~32
    lending_reserved: int = 10  # a worker's reserved slots by default (200 // 20)
    lending_rounds: int = 100
    log_turns: int = 100  # loop turns a round
    quiet_finished: int = 100_000  # the finished invocations the quiet spell's ANALYZE saw
    quiet_queued: int = 50_000
    quiet_tenants: int = 256
    quiet_claims: int = 20
    window_posts: int = 10_000  # quietwindow's burst, posted through a gateway
    window_slots: int = 16  # the worker's slots, fewer than the gateway's pace: a backlog builds
    window_handler_s: float = 0.02  # what each of the burst's invocations awaits
    window_rounds: int = 2  # bursts on each of the baseline and the quiet spell, alternating
    window_early_s: float = 5.0  # the first seconds of a burst, the check's window within them
    idle_seconds: float = 30.0  # how long an idle worker is watched
    idle_settle: float = 5.0  # after it started (its first passes, its first statistics check)
    large_input_posts: int = 2000  # invocations in each of largeinputs' two sets
    large_input_messages: int = 200  # the conversation set's input: messages of ~300 characters
    large_input_rounds: int = 4  # rounds of posts, then of status sweeps, each set alternating
    deadline: float = 300.0  # no single wait in a scenario lasts longer


FULL = Sizes()
QUICK = Sizes(
    process_counts=(1,),
    accept_posts=100,
    accept_warmup=10,
    accept_rounds=1,
    drain_messages=300,
    e2e_seconds=1.5,
    e2e_warmup=0.5,
    sync_count=20,
    sync_warmup=3,
    sync_poll_timeouts_ms=(100,),
    io_invocations=50,
    io_seconds=0.5,
    io_concurrency_setting=50,
    stream_events=300,
    streams=10,
    stream_ticks=3,
    stream_interval=0.2,
    cost_invocations=50,
    parked_invocations=200,
    resume_samples=20,
    timers=20,
    timer_sleep=2.0,
    timer_spread=2.0,
    peer_posts=100,
    peer_warmup=10,
    peer_sync_seconds=1.0,
    peer_sync_count=50,
    peer_streams=8,
    peer_stream_events=5,
    peer_stream_concurrency=4,
    sidebyside_rounds=2,
    fanout_connections=(50,),
    fanout_ticks=3,
    fanout_subscribers=20,
    storm_clients=20,
    storm_rate=20,
    storm_seconds=1,
    storm_invocations=2,
    storm_events=20,
    eventlog_invocations=200,
    eventlog_events_each=20,
    eventlog_append=200,
    eventlog_replay=50,
    eventlog_rounds=1,
    retention_ticks=40,
    retention_tick=0.05,
    flood_backlog=3000,
    flood_window=2.0,
    flood_a_window=2.0,
    flood_warmup=0.5,
    caps_starts=600,
    caps_tenants=4,
    caps_max=3,
    caps_global=6,
    backlog_queued=5000,
    backlog_tenants=10,
    backlog_posts=100,
    backlog_rounds=1,
    heartbeat_attempts=20,
    heartbeat_rows=500,
    heartbeat_rounds=3,
    chatty_invocations=10,
    chatty_events=300,
    statements_rounds=10,
    embedded_rounds=10,
    embedded_large_rounds=3,
    log_rounds=10,
    newcomers_listed=32,
    newcomers_rounds=5,
    lending_listed=64,
    lending_rounds=5,
    log_turns=20,
    quiet_finished=2000,
    quiet_queued=2000,
    quiet_tenants=16,
    quiet_claims=3,
    window_posts=2500,
    window_rounds=1,
    idle_seconds=2.0,
    idle_settle=1.0,
    large_input_posts=100,
    large_input_rounds=2,
    deadline=60.0,
)


def poll(predicate: object, deadline: float, what: str, interval: float = 0.02) -> None:
    """Call ``predicate`` until it is true; fail after ``deadline`` seconds."""
    assert callable(predicate)
    end = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {deadline:.0f}s waiting for {what}")
        time.sleep(interval)


class Pg:
    """A sync autocommit connection to the private database, for setup and measurement."""

    def __init__(self, db: Database) -> None:
        self.conn = psycopg.connect(db.url, autocommit=True)
        self.queries = 0  # each one is a transaction of its own in pg_stat_database

    def close(self) -> None:
        self.conn.close()

    def scalar(self, sql: str, *params: object) -> Any:
        self.queries += 1
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    def recount_open(self) -> None:
        """The store's open counts (owner cap, max_queued) made to include rows seeded here."""
        with self.conn.transaction():
            for statement in recount_statements("postgresql"):
                self.conn.execute(statement)

    def count(self, status: str) -> int:
        return int(
            self.scalar("SELECT count(*) FROM tether_invocations WHERE status = %s", status) or 0
        )

    def wait_completed(self, total: int, deadline: float) -> None:
        poll(
            lambda: self.count("completed") >= total,
            deadline,
            f"{total} completed invocations",
            0.05,
        )
        failed = self.count("failed")
        if failed:
            raise RuntimeError(f"{failed} invocations failed")

    def span(self, start_column: str, end_column: str) -> float:
        """Seconds from the earliest ``start_column`` to the latest ``end_column`` (database
        clock)."""
        row = self.conn.execute(
            f"SELECT max({end_column}) - min({start_column}) FROM tether_invocations"
        ).fetchone()
        assert row is not None and row[0] is not None
        return float(row[0])

    def prefill_finished(self, count: int) -> None:
        """``count`` completed invocations of 300 owners ``quiet-N`` (ids ``done-N``), in one
        statement: a table's history, for its statistics to be taken over. Finished an hour ago,
        within any retention: a history dated 1970 kept a worker's reaper deleting it, up to
        half of every pass, before the pass's statistics check."""
        self.conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " created_at, enqueued_at, started_at, finished_at)"
            " SELECT 'done-' || g, 'quiet-' || (g %% 300), 'quiet-' || (g %% 300), '{}', 'prefill',"
            " 'completed', t - 2, t - 2, t - 1, t FROM generate_series(1, %s) AS g,"
            " (SELECT extract(epoch from now()) - 3600 AS t) AS an_hour_ago",
            (count,),
        )
        self.queries += 1

    def prefill(self, count: int) -> list[str]:
        """``count`` queued invocations, as if accepted, in one statement."""
        rows = self.conn.execute(
            "INSERT INTO tether_invocations (id, owner, tenant, input, request_hash, status,"
            " attempt, cancel_requested, last_event_id, created_at, enqueued_at)"
            " SELECT gen_random_uuid()::text, 'bench-' || (g %% 256), 'bench-' || (g %% 256),"
            " '{}'::jsonb, 'prefill',"
            " 'queued', 0, false, 0, extract(epoch from clock_timestamp()),"
            " extract(epoch from clock_timestamp())"
            " FROM generate_series(1, %s) AS g RETURNING id",
            (count,),
        ).fetchall()
        self.recount_open()
        return [r[0] for r in rows]


class Queue:
    """A Dramatiq queue seen from outside: bulk enqueue and what is left to process."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client = redis.Redis.from_url(REDIS_URL)
        self.script = self.client.register_script(DISPATCH_LUA.read_bytes())
        self.broker_id = str(uuid.uuid4())

    def close(self) -> None:
        self.client.close()

    def enqueue_many(self, actor: str, ids: list[str], chunk: int = 1000) -> None:
        for start in range(0, len(ids), chunk):
            pipe = self.client.pipeline(transaction=False)
            for invocation_id in ids[start : start + chunk]:
                redis_id = str(uuid.uuid4())
                message: dramatiq.Message[None] = dramatiq.Message(
                    queue_name=self.name,
                    actor_name=actor,
                    args=(invocation_id,),
                    kwargs={},
                    options={"redis_message_id": redis_id},
                )
                argv: list[str | int | bytes] = [
                    "enqueue",
                    int(time.time() * 1000),
                    self.name,
                    self.broker_id,
                    60000,
                    604800000,
                    0,
                    3000,
                    redis_id,
                    message.encode(),
                ]
                self.script(keys=["dramatiq"], args=argv, client=pipe)
            pipe.execute()

    def unfinished(self) -> int:
        """Messages enqueued and not yet acknowledged (queued, prefetched or running)."""
        return int(self.client.hlen(f"dramatiq:{self.name}.msgs"))
