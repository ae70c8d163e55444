"""Grammars compile in two threads the gateway keeps for them: one tenant's compiles take one at a time, and what is
remembered answers without a thread (a review: a plain json_object request waited 12 s behind another tenant's 24
schemas, all in one queue)."""

import asyncio
import threading
import time
from types import SimpleNamespace

from gateway.api.prepare import _compiling
from serving.grammar import CACHE_SCOPE, REMEMBERED_ONLY, NotRemembered

SMALL = SimpleNamespace(headers={"content-length": "300"})


def a_compile(release: threading.Event, started: list[str]):
    """A compile that nothing remembers, taking until `release` is set; who ran it goes on `started`."""

    def slow(who: str) -> str:
        if REMEMBERED_ONLY.get():
            raise NotRemembered
        started.append(who)
        release.wait(10)
        return who

    return slow


def test_one_tenants_compiles_leave_a_thread_for_another():
    release = threading.Event()
    in_pool: list[str] = []
    slow = a_compile(release, in_pool)

    def quick(who: str) -> str:
        if REMEMBERED_ONLY.get():
            raise NotRemembered
        return who

    async def as_tenant(tenant: str, fn, who: str) -> str:
        CACHE_SCOPE.set(tenant)  # as prepare_chat sets it, in this request's task
        return await _compiling(SMALL, fn, who)

    async def run():
        mallory = [asyncio.create_task(as_tenant("mallory", slow, f"m{i}")) for i in range(4)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        alice = await asyncio.wait_for(as_tenant("alice", quick, "a"), 5)
        waited = time.monotonic() - started
        assert in_pool == ["m0"]  # one of mallory's at a time
        release.set()
        return alice, waited, await asyncio.gather(*mallory)

    alice, waited, mallory = asyncio.run(run())
    assert alice == "a" and waited < 1.0
    assert mallory == ["m0", "m1", "m2", "m3"]


def test_what_is_remembered_answers_on_the_event_loop():
    threads = []

    def remembered() -> str:
        threads.append(threading.current_thread().name)
        return "kept"

    assert asyncio.run(_compiling(SMALL, remembered)) == "kept"
    assert threads == [threading.main_thread().name]
    # a large body's schemas are not read again on the loop: straight to a compiling thread
    large = SimpleNamespace(headers={"content-length": str(1 << 20)})
    assert asyncio.run(_compiling(large, remembered)) == "kept"
    assert threads[1].startswith("grammar")


def test_a_request_that_leaves_mid_compile_keeps_its_tenants_turn_until_the_thread_ends():
    """(a second review) The turn went with the cancelled request while its compile went on in the thread: the
    tenant's next compile took the pool's other thread, and another tenant waited behind both."""
    release = threading.Event()
    started = []
    slow = a_compile(release, started)

    async def as_tenant(tenant: str, who: str) -> str:
        CACHE_SCOPE.set(tenant)
        return await _compiling(SMALL, slow, who)

    async def run():
        first = asyncio.create_task(as_tenant("mallory", "m1"))
        await asyncio.sleep(0.2)
        first.cancel()  # the client left; its compile goes on
        second = asyncio.create_task(as_tenant("mallory", "m2"))
        await asyncio.sleep(0.3)
        assert started == ["m1"]  # m2 waits for m1's thread, not for a free one
        release.set()
        return await second

    assert asyncio.run(run()) == "m2"
