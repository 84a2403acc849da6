"""Misbehaving clients against real servers: a reader that stops reading a large stream, an
upload that never arrives, a client that hangs up mid-upload.

Each mode gets a server of its own with tight limits (a 1 s send timeout would disconnect a
merely busy reader of the shared servers): ``tether dev`` on a SQLite file, and a gateway
process beside the session's cluster, sharing its database, Redis and workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from tests.client import Api, assert_clean_log, new_id
from tests.harness import Cluster, Proc, start_dev, wait_for
from tests.rawhttp import RawConnection, complete_events, dechunk, request

BUFFER = 64 * 1024
TIGHT = {
    "TETHER_LIMITS__STREAM_BUFFER_BYTES": str(BUFFER),
    "TETHER_TIMERS__STREAM_SEND_TIMEOUT": "1",
    "TETHER_TIMERS__BODY_READ_TIMEOUT": "1",
}
EVENTS, PAD = 2000, 8000  # a 16 MB stream
PACED = {"pad": PAD, "emit_sleep": 0.001}  # small batches: no multi-MB pub/sub message to decode
UPLOADER = {"X-Forwarded-User": "uploader@example.com"}
"""A known caller: an unknown one gets its 401 before the body is read."""


@pytest.fixture(scope="module")
def tight_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    workdir = tmp_path_factory.mktemp("tight-dev")
    proc, base = start_dev(workdir, "tests.apps.contract:app", TIGHT, db=str(workdir / "t.db"))
    try:
        yield proc, base
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tight_gateway(
    cluster: tuple[Cluster, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    shared, _ = cluster
    beside = Cluster(
        shared.database_url,
        shared.redis_url,
        tmp_path_factory.mktemp("tight-gateway"),
        queue=shared.queue,
        env_overrides=TIGHT,
    )
    try:
        yield beside.start_gateway()
    finally:
        beside.stop()


@pytest.fixture(params=["embedded", "distributed"])
def tight(request: pytest.FixtureRequest) -> tuple[Proc, str]:
    name = "tight_dev" if request.param == "embedded" else "tight_gateway"
    proc, base = request.getfixturevalue(name)
    return proc, base


@pytest.fixture
async def api(tight: tuple[Proc, str]) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        yield Api(session, tight[1])


def assert_no_error_logged(proc: Proc) -> None:
    log = proc.log()
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]


async def test_a_stalled_reader_is_closed_holding_bounded_memory_and_resumes_losing_nothing(
    tight: tuple[Proc, str], api: Api
) -> None:
    proc, base = tight
    warm_up = {"id": new_id(), "input": {"emit": EVENTS // 4, **PACED}}
    _, events = await api.stream(warm_up)  # a prompt reader of a large stream, for the baseline
    assert_clean_log(events)
    baseline = proc.peak_rss_mb()
    invocation_id = new_id()
    body = {"id": invocation_id, "input": {"emit": EVENTS, **PACED}, "background": True}
    assert (await api.post(body))[0] == 202
    reader = await RawConnection.open(base, recv_buffer=4096)
    headers = {"X-Forwarded-Email": api.owner}
    await reader.send(request("GET", f"/api/invocations/{invocation_id}/events", headers))
    assert (await reader.read_head()).status == 200
    closing = f"invocation {invocation_id}: stream reader too far behind"
    await asyncio.to_thread(wait_for, lambda: closing in proc.log(), 60, "the reader closed")
    await api.wait_status(invocation_id, {"completed"}, timeout=60)
    grown = proc.peak_rss_mb() - baseline
    first = complete_events(dechunk(await reader.read_to_end()).decode(errors="replace"))
    reader.close()
    assert first and first[-1].type != "run.completed"
    rest = await api.events(invocation_id, after=first[-1].id)
    assert_clean_log(first + rest)
    assert len(first + rest) == EVENTS + 2
    # unbounded, a stalled reader held 13 of these 16 MB (the rest sat in kernel buffers)
    assert grown < EVENTS * PAD / 2**20 / 4, f"the gateway grew {grown:.1f} MB"
    assert_no_error_logged(proc)


async def test_a_silent_upload_gets_408(tight: tuple[Proc, str]) -> None:
    proc, base = tight
    silent = await RawConnection.open(base)
    try:
        head = {"Content-Type": "application/json", "Content-Length": "100", **UPLOADER}
        await silent.send(request("POST", "/api/invocations", head) + b'{"id":')
        answer = await silent.read_head()
        assert answer.status == 408
        assert b'"code":"request_timeout"' in await silent.read_body(answer)
    finally:
        silent.close()


async def test_a_hang_up_mid_upload_is_no_error(tight: tuple[Proc, str], api: Api) -> None:
    proc, base = tight
    quitter = await RawConnection.open(base)
    head = {
        "Content-Type": "application/json",
        "Content-Length": "1000",
        "Expect": "100-continue",
        **UPLOADER,
    }
    await quitter.send(request("POST", "/api/invocations", head))
    assert (await quitter.read_head()).status == 100  # the gateway is reading the body now
    await quitter.send(b'{"id": "')
    quitter.close()

    async def counted() -> str:
        async with api.session.get(f"{base}/metrics") as r:
            return await r.text()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while 'route="/api/invocations",status="499"' not in (metrics := await counted()):
        assert loop.time() < deadline, metrics
        await asyncio.sleep(0.05)
    assert 'status="500"' not in metrics
    assert_no_error_logged(proc)
