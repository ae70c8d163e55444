"""Privacy tags from the request: body `metadata.privacy` and the X-Tandem-Privacy header.

Tags are lower-cased names ("pii", "confidential", ...); the policy says which
of them keep a request on the device. Content detectors join here later.
"""

from gateway.errors import BadRequest


def privacy_tags(metadata_value: object, header_value: str | None) -> frozenset[str]:
    tags: set[str] = set()
    if metadata_value is not None:
        if isinstance(metadata_value, str):
            tags |= _split(metadata_value)
        elif isinstance(metadata_value, list) and all(isinstance(v, str) for v in metadata_value):
            tags |= {v.strip().lower() for v in metadata_value if v.strip()}
        else:
            raise BadRequest('metadata.privacy must be a string or a list of strings, e.g. "pii"')
    if header_value:
        tags |= _split(header_value)
    return frozenset(tags)


def _split(value: str) -> set[str]:
    return {part.strip().lower() for part in value.split(",") if part.strip()}
