"""An old Redis is named by its version, where its own refusal would not say why."""


def test_a_redis_too_old_for_the_scripts_is_named_by_its_version():
    """Redis 6 refuses the scripts with a compile error that says nothing of versions; the gateway's log and the
    worker's say which Redis it is and what it needs."""
    import asyncio

    import redis

    from gateway.hints.redis_index import RedisHintIndex
    from proto.prefix_hints import too_old

    assert "Redis 6.2.6 is older than 7.0" in too_old("6.2.6")
    assert too_old("7.0.15") is None and too_old("7.4.1") is None and too_old("10.0.0") is None
    assert too_old("") is None and too_old("unstable") is None  # unreadable: Redis's own error speaks

    class Answers:  # what INFO server says; the scripts are never run here
        def __init__(self, version):
            self.version = version

        def register_script(self, script):
            return None

        async def info(self, section):
            return {"redis_version": self.version}

    refused = redis.ResponseError("Error compiling script (new function): user_script:1: unexpected symbol near '#'")
    old, current = RedisHintIndex(Answers("6.0.16"), "m"), RedisHintIndex(Answers("7.2.4"), "m")
    assert asyncio.run(old.explain(refused)).startswith("Redis 6.0.16 is older than 7.0")
    assert asyncio.run(current.explain(refused)) == f"Redis failed: {refused}"
    assert asyncio.run(old.explain(redis.ConnectionError("refused"))) == "Redis failed: refused"
