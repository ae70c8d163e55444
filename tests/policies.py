"""Policies built without validation, to test the layers under the load-time checks."""

from gateway.policy.schema import DeviceMatch, IntRange, Match, Policy, Pool, Privacy, Profile, Rule


def unchecked_policy(raw: dict) -> Policy:
    """A Policy from a raw dict with every validator skipped, as if the load-time checks had a bug."""

    def match(m: dict) -> Match:
        ranges = {k: IntRange(**m[k]) for k in ("prompt_tokens", "max_tokens", "priority") if k in m}
        device = {"device": DeviceMatch(**m["device"])} if "device" in m else {}
        rest = {k: v for k, v in m.items() if k not in ("prompt_tokens", "max_tokens", "priority", "device")}
        return Match.model_construct(**rest, **ranges, **device)

    privacy = {"never_leave_device": ["private", "pii", "confidential"], "detectors": [], "detected_tag": "pii"}
    return Policy.model_construct(
        version=1,
        privacy=Privacy.model_construct(**(privacy | raw.get("privacy", {}))),
        pools={
            name: Pool.model_construct(kind=p["kind"], endpoints=p["endpoints"], profile=Profile())
            for name, p in raw["pools"].items()
        },
        rules=[
            Rule.model_construct(
                name=r["name"], match=match(r.get("match", {})), route=r["route"], fallback=r.get("fallback", [])
            )
            for r in raw["rules"]
        ],
    )
