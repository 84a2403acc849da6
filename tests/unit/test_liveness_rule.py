"""The rule that finds dead workers from the scans of one session (pure), and the liveness
connection's URL."""

from __future__ import annotations

from tether.liveness_keepalive import MAX_KEEPALIVE_COUNT, MAX_KEEPALIVE_IDLE, MAX_STALE_AFTER
from tether.settings import Settings
from tether.store.liveness import Sighting
from tether.worker.liveness import Death, Observer, liveness_url, scan_every


def seen(name: str, held: bool, silent: bool, lock_id: int = 7, stale: bool = False) -> Sighting:
    return Sighting(name, lock_id, held=held, silent=silent, stale=stale)


def went(sighting: Sighting) -> Death:
    return Death(sighting, seen_to_go=True)


def test_a_lock_seen_held_then_gone_with_a_silent_worker_is_a_death() -> None:
    observer = Observer("me")
    assert observer.judge([seen("w", held=True, silent=False)]) == []
    assert observer.judge([seen("w", held=False, silent=True)]) == [went(seen("w", False, True))]


def test_a_lock_never_seen_held_on_this_session_proves_nothing() -> None:
    """After a server restart every lock is gone and every beat is old: nobody is dead."""
    observer = Observer("me")
    assert observer.judge([seen("w", held=False, silent=True)]) == []


def test_a_lockless_worker_silent_for_stale_after_is_dead_though_nobody_saw_it_go() -> None:
    """Every worker killed at once, or one killed before anyone scanned: no witness is left."""
    observer = Observer("me")
    stale = seen("w", held=False, silent=True, stale=True)
    assert observer.judge([stale]) == [Death(stale, seen_to_go=False)]


def test_the_unwitnessed_rule_waits_for_peers_to_reconnect_after_the_scanners_own_does() -> None:
    """After an outage every beat is old: a scanner back first leaves the others the settle
    time (in the worker: ``liveness_grace + 2 × liveness_interval``) to beat again."""
    observer = Observer("me", settle=3.0)
    observer.new_session(now=100.0)
    stale = seen("w", held=False, silent=True, stale=True)
    assert observer.judge([stale], now=102.9) == []
    assert observer.judge([stale], now=103.0) == [Death(stale, seen_to_go=False)]
    observer.new_session(now=200.0)  # each session of the scanner waits again
    assert observer.judge([stale], now=201.0) == []


def test_a_held_lock_keeps_a_worker_alive_however_long_it_is_silent() -> None:
    """A frozen process keeps its session: the heartbeat rule replaces its attempts, not this."""
    observer = Observer("me")
    assert observer.judge([seen("w", held=True, silent=True, stale=True)]) == []
    assert observer.judge([seen("w", held=True, silent=True, stale=True)]) == []


def test_a_new_session_forgets_every_lock_it_saw() -> None:
    observer = Observer("me")
    observer.judge([seen("w", held=True, silent=False)])
    observer.new_session()
    assert observer.judge([seen("w", held=False, silent=True)]) == []


def test_a_worker_that_still_beats_is_alive_without_its_lock() -> None:
    observer = Observer("me")
    observer.judge([seen("w", held=True, silent=False)])
    assert observer.judge([seen("w", held=False, silent=False)]) == []
    assert observer.judge([seen("w", held=False, silent=True)]) == [went(seen("w", False, True))]


def test_a_worker_that_took_a_new_lock_is_judged_by_the_new_one() -> None:
    observer = Observer("me")
    observer.judge([seen("w", held=True, silent=False, lock_id=1)])
    assert observer.judge([seen("w", held=False, silent=True, lock_id=2)]) == []


def test_a_scanner_never_judges_itself() -> None:
    observer = Observer("me")
    observer.judge([seen("me", held=True, silent=False)])
    assert observer.judge([seen("me", held=False, silent=True)]) == []


def test_only_workers_holding_their_lock_set_the_scan_cadence() -> None:
    """Rows of dead workers nobody has judged yet must not slow the scans down."""
    dead = [seen(f"d{i}", held=False, silent=True, lock_id=i) for i in range(30)]
    live = [seen(f"l{i}", held=True, silent=False, lock_id=100 + i) for i in range(2)]
    assert scan_every(dead + live) == 1
    many = [seen(f"l{i}", held=True, silent=False, lock_id=100 + i) for i in range(12)]
    assert scan_every(dead + many) == 3


def test_the_liveness_connection_has_keepalives_a_timeout_and_a_name() -> None:
    settings = Settings.model_validate(
        {"database_url": "postgresql://u@db/t?options=-c%20search_path%3Dx"}
    )
    url = liveness_url(settings)
    query = url.query
    assert url.drivername == "postgresql+psycopg" and url.host == "db"
    assert query["keepalives"] == "1" and query["tcp_user_timeout"] == "5000"
    assert int(str(query["keepalives_idle"])) + int(str(query["keepalives_count"])) == 5
    assert query["application_name"] == "tether-liveness"
    assert query["options"] == "-c search_path=x -c statement_timeout=5000"


def test_the_longest_stale_after_asks_for_no_more_keepalive_probes_than_linux_takes() -> None:
    settings = Settings.model_validate({"timers": {"stale_after": MAX_STALE_AFTER}})
    query = liveness_url(settings).query
    assert int(str(query["keepalives_count"])) <= MAX_KEEPALIVE_COUNT == 127
    assert int(str(query["keepalives_idle"])) <= MAX_KEEPALIVE_IDLE == 32_767
    assert int(str(query["keepalives_idle"])) + int(str(query["keepalives_count"])) == 32_894


def test_a_direct_liveness_url_bypasses_the_pooler() -> None:
    settings = Settings.model_validate(
        {
            "database_url": "postgresql://u@pgbouncer:6432/t",
            "worker": {"liveness_url": "postgresql://u@db:5432/t"},
        }
    )
    url = liveness_url(settings)
    assert (url.host, url.port) == ("db", 5432)
