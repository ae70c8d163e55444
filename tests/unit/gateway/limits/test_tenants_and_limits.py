"""Tenants (hashed keys, limits) and the in-process buckets."""

import asyncio

import pytest

from gateway.limits.admission import AdmissionController
from gateway.limits.buckets import Charge, LocalBuckets
from gateway.tenants import Tenants, TenantsError, hash_key
from serving.openai.errors import BadRequest, RateLimited


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_request_bucket_refills_over_a_minute():
    clock = Clock()
    buckets = LocalBuckets(clock)
    charge = Charge("t", requests_per_minute=2, tokens_per_minute=None, tokens=0)
    assert [asyncio.run(buckets.take(charge)).wait for _ in range(2)] == [0.0, 0.0]
    assert asyncio.run(buckets.take(charge)).wait == pytest.approx(30.0)  # one request per 30 s comes back
    clock.now = 30.0
    assert asyncio.run(buckets.take(charge)).wait == 0.0


def test_tokens_are_charged_up_front_and_unused_ones_given_back():
    clock = Clock()
    buckets = LocalBuckets(clock)
    charge = Charge("t", requests_per_minute=None, tokens_per_minute=1000, tokens=600)
    assert asyncio.run(buckets.take(charge)).wait == 0.0
    assert asyncio.run(buckets.take(charge)).wait > 0  # 400 left, 600 asked
    asyncio.run(buckets.give_back("t", 1000, 500))  # the first used only 100
    assert asyncio.run(buckets.take(charge)).wait == 0.0


def test_a_refused_request_takes_nothing_from_either_bucket():
    buckets = LocalBuckets(Clock())
    asyncio.run(buckets.take(Charge("t", 10, 100, 90)))
    assert asyncio.run(buckets.take(Charge("t", 10, 100, 50))).wait > 0  # tokens refuse
    taken = asyncio.run(buckets.take(Charge("t", 10, 100, 10)))
    assert taken.wait == 0.0 and taken.levels == (8.0, 0.0)  # the refused one took no request


def test_rate_limit_headers_say_what_is_left_and_when_it_is_full_in_openais_form():
    from gateway.limits.admission import go_duration, rate_headers

    headers = rate_headers({"requests": (60, 58.7, 1.3), "tokens": (1000, 400.0, 36.0)})
    assert headers == {
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "58",
        "x-ratelimit-reset-requests": "1.3s", "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "400", "x-ratelimit-reset-tokens": "36s",
    }  # fmt: skip
    assert [go_duration(s) for s in (0.0204, 0.5, 1, 59.9996, 360, 61.25)] == [
        "21ms",
        "500ms",
        "1s",
        "1m0s",
        "6m0s",
        "1m1.25s",
    ]


def write(tmp_path, text):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    return path


def test_keys_are_hashed_and_map_to_tenants(tmp_path):
    path = write(tmp_path, f"tenants:\n  acme: {{keys: ['{hash_key('k-acme')}'], requests_per_minute: 5}}\n")
    tenants = Tenants.load(path, ["globex:k-globex", "k-plain"])
    assert tenants.requires_key
    assert tenants.authenticate("k-acme") == "acme"
    assert tenants.authenticate("k-globex") == "globex"
    assert tenants.authenticate("k-plain") == "default"
    assert tenants.authenticate("wrong") is None
    assert "k-acme" not in path.read_text()


@pytest.mark.parametrize(
    "text, message",
    [
        ("tenants:\n  acme: {keys: [k-plaintext]}\n", "keys are stored hashed"),
        ("tenants:\n  acme: {keys: [], requests_per_minute: 0}\n", "greater than or equal to 1"),
        ("tenants:\n  acme: {keyz: []}\n", "Extra inputs"),
        # values of another kind, which the policy refuses too (a review: `true` served as 1, '4' as 4)
        ("tenants:\n  acme: {requests_per_minute: true}\n", "tenants.yaml:2: tenants.acme.requests_per_minute"),
        ("tenants:\n  acme: {max_concurrent: '4'}\n", "tenants.acme.max_concurrent: Input should be a valid integer"),
        ("default_limits: {max_priority: false}\n", "default_limits.max_priority"),
    ],
)
def test_bad_tenants_file_is_refused(tmp_path, text, message):
    with pytest.raises(TenantsError, match=message):
        Tenants.load(write(tmp_path, text), [])


@pytest.mark.parametrize("entry", [f"acme:{hash_key('k')}", hash_key("k"), f"acme:{hash_key('k').upper()}"])
def test_a_keys_hash_given_as_a_key_is_refused(entry):
    """(a review) `acme:sha256:…`, the hash `tandem keys new` prints put where the key goes, made the hash itself the
    bearer key."""
    with pytest.raises(TenantsError, match="a key's hash, which belongs in the tenants file"):
        Tenants.load(None, [entry])


def test_tenant_limits_fall_back_to_the_defaults(tmp_path):
    path = write(tmp_path, "default_limits: {requests_per_minute: 100, max_concurrent: 4}\n"
                           "tenants:\n  acme: {requests_per_minute: 5}\n")  # fmt: skip
    tenants = Tenants.load(path, [])
    assert tenants.limits("acme").requests_per_minute == 5 and tenants.limits("acme").max_concurrent == 4
    assert tenants.limits("someone-else").requests_per_minute == 100


def test_admission_concurrency_and_oversized_requests(tmp_path):
    tenants = Tenants.load(write(tmp_path, "tenants:\n  acme: {max_concurrent: 1, tokens_per_minute: 100}\n"), [])
    controller = AdmissionController(tenants)

    async def go():
        first = await controller.admit("acme", 10)
        with pytest.raises(RateLimited) as err:
            await controller.admit("acme", 10)
        assert err.value.headers["Retry-After"] == "1"
        await first.release(10)
        second = await controller.admit("acme", 10)  # the slot is free again
        await second.release(10)
        with pytest.raises(BadRequest, match="more than tenant 'acme'"):
            await controller.admit("acme", 500)
        with pytest.raises(RateLimited) as err:  # 20 of 100 used: the token rate (the only one set) refuses 90
            await controller.admit("acme", 90)
        assert err.value.body()["error"]["type"] == "tokens" and err.value.code == "rate_limit_exceeded"

    asyncio.run(go())


def test_a_tenant_without_limits_says_nothing_of_redis(tmp_path, caplog):
    """(a review) A tenant without limits takes from no bucket, so its request never reaches Redis; it set the mode
    to `redis` all the same, at each retry while Redis was down, and back to `local` at the next failure: two log
    lines and a flip of tandem_gateway_rate_limit_mode every 5 s for as long as Redis was down."""
    import logging

    from gateway import metrics
    from gateway.redis_client import RedisWatch

    class DownRedis:
        def register_script(self, _source):
            async def call(**_):
                raise ConnectionError("Redis is down")

            return call

    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  acme: {requests_per_minute: 100}\n")
    watch = RedisWatch(retry_after_s=0.01)
    controller = AdmissionController(Tenants.load(path, []), DownRedis(), watch=watch)

    async def go():
        await (await controller.admit("acme")).release()  # limited: asks Redis, which fails
        for _ in range(5):
            await asyncio.sleep(0.02)  # past each retry window
            await (await controller.admit("default")).release()  # no limits: asks no one
        return metrics.RATE_LIMIT_MODE.labels("local")._value.get()

    with caplog.at_level(logging.INFO, logger="gateway.limits.admission"):
        assert asyncio.run(go()) == 1
    assert not [r for r in caplog.records if "shared through Redis" in r.getMessage()]


def test_a_tenants_file_gone_or_broken_keeps_the_keys_before_it(tmp_path, monkeypatch, caplog):
    """A reload serves a file that can be used; one gone, broken or leaving an api-key gateway without a key is
    refused, said once, and the keys before it keep working."""
    from gateway import tenants as tenants_module
    from gateway.policy import reloader

    monkeypatch.setattr(reloader, "SETTLE_S", 0.0)
    path = write(tmp_path, f"tenants:\n  acme: {{keys: ['{hash_key('old')}']}}\n")
    tenants = Tenants.load(path, [], b"s")

    def read():
        config = tenants_module.read_tenants(path, [])
        if not Tenants(config, b"s").requires_key:
            raise TenantsError("no API keys")
        return config

    watcher = tenants_module.TenantsReloader(tenants, path, read)

    async def go():
        path.write_text(f"tenants:\n  acme: {{keys: ['{hash_key('new')}']}}\n")
        assert await watcher.reload()
        assert tenants.authenticate("new") == "acme" and tenants.authenticate("old") is None
        for broken in ["tenants: {acme: {keys: [x]}}\n", "tenants: {}\n"]:
            path.write_text(broken)
            assert not await watcher.reload() and not await watcher.reload()  # refused, and said once
            assert tenants.authenticate("new") == "acme"
        path.unlink()
        assert not await watcher.reload()
        assert tenants.authenticate("new") == "acme"

    with caplog.at_level("ERROR"):
        asyncio.run(go())
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 3 and "keys are stored hashed" in refusals[0] and "no API keys" in refusals[1]


def test_a_key_removed_while_the_gateway_starts_is_removed_when_the_watch_begins(tmp_path, monkeypatch):
    """(a review) The watch took the file as it was when it began for what was serving: a key removed between the
    gateway's reading the file and its watch's start (backends polled, tokenizers read) stayed open for good."""
    from gateway import tenants as tenants_module
    from gateway.policy import reloader

    monkeypatch.setattr(reloader, "SETTLE_S", 0.0)
    path = write(tmp_path, f"tenants:\n  acme: {{keys: ['{hash_key('leaked')}', '{hash_key('kept')}']}}\n")
    tenants = Tenants.load(path, [], b"s")
    path.write_text(f"tenants:\n  acme: {{keys: ['{hash_key('kept')}']}}\n")  # revoked while the gateway starts

    async def go():
        watch = asyncio.create_task(
            tenants_module.TenantsReloader(tenants, path, lambda: tenants_module.read_tenants(path, [])).run()
        )
        await asyncio.sleep(0.5)
        watch.cancel()

    asyncio.run(go())
    assert tenants.authenticate("leaked") is None and tenants.authenticate("kept") == "acme"
