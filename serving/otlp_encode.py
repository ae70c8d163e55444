"""Finished spans to the bytes of an OTLP `ExportTraceServiceRequest`, written straight to the protobuf wire format.

The same message `opentelemetry-exporter-otlp-proto-common`'s `encode_spans` builds (tests/unit/serving/
test_otlp_encode.py parses both and compares), at a fraction of its cost: that one makes a protobuf object for
every span, attribute and value, 25-75 µs a span here, with the GIL held, while the gateway makes about nine spans a
request (bench/gateway_overhead.py, docs/benchmarks.md). A value this encoder does not write raises TypeError (a
type it does not know, an int past int64), and the exporter (serving/telemetry.py) then sends that batch through
the library's own encoder, which drops the one attribute. A lone surrogate in any string is written as U+FFFD (where
the library drops the attribute, or fails the span).

Field numbers: opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto.
"""

import re
import struct
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan

_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_DOUBLE = struct.Struct("<d").pack
_IS_REMOTE_KNOWN, _IS_REMOTE = 0x100, 0x200  # SpanFlags: the parent's is_remote is known / true


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """One request holding every span, grouped by resource, then instrumentation scope, in first-seen order."""
    return assemble([encoded_span(span) for span in spans])


def encoded_span(span: ReadableSpan) -> tuple:
    """A span's own bytes (a `Span` message), with the resource and scope `assemble` groups it under: the costly part
    of encoding, done one span at a time (serving/telemetry.py does it on the event loop, between requests)."""
    return span.resource, span.instrumentation_scope, _span(span)


def assemble(items: Sequence[tuple]) -> bytes:
    """One request from `encoded_span`'s items, grouped by resource, then instrumentation scope, in first-seen order."""
    groups: list = []  # [(resource, [(scope, [encoded span])])]
    by_identity: dict[tuple[int, int], list[bytes]] = {}  # hashing a Resource serializes it to JSON: ids instead
    for resource, scope, span_bytes in items:
        key = (id(resource), id(scope))
        if (encoded := by_identity.get(key)) is None:
            encoded = by_identity[key] = _group(groups, resource, scope)
        encoded.append(span_bytes)
    request = bytearray()
    for resource, scopes in groups:
        body = _field(1, _attributes(1, resource.attributes))  # Resource{attributes = 1}
        for scope, encoded in scopes:
            scope_spans = _field(1, _scope(scope)) + b"".join(_field(2, s) for s in encoded)
            if scope is not None and scope.schema_url:
                scope_spans += _field(3, scope.schema_url.encode())
            body += _field(2, scope_spans)
        if resource.schema_url:
            body += _field(3, resource.schema_url.encode())
        request += _field(1, body)
    return bytes(request)


def _group(groups: list, resource, scope) -> list[bytes]:
    """The span list of (resource, scope): an equal pair's when one was seen (the library merges them), else new."""
    for seen, scopes in groups:  # noqa: B007 - the loop leaves the resource's scopes in `scopes`
        if seen == resource:
            break
    else:
        scopes = []
        groups.append((resource, scopes))
    for seen, encoded in scopes:
        if seen == scope:
            return encoded
    encoded = []
    scopes.append((scope, encoded))
    return encoded


def _span(span: ReadableSpan) -> bytes:
    context = span.get_span_context()
    out = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    if context.trace_state:
        out.append(_field(3, ",".join(f"{k}={v}" for k, v in context.trace_state.items()).encode()))
    if span.parent is not None:
        out += (b"\x22\x08", span.parent.span_id.to_bytes(8, "big"))
    out += (_field(5, _text(span.name)), b"\x30", _varint(span.kind.value + 1))  # INTERNAL is 1 in OTLP
    out += (b"\x39", _FIXED64(span.start_time), b"\x41", _FIXED64(span.end_time))
    out.append(_attributes(9, span.attributes))
    if span.dropped_attributes:
        out += (b"\x50", _varint(span.dropped_attributes))
    for event in span.events:
        encoded = b"\x09" + _FIXED64(event.timestamp) + _field(2, _text(event.name))
        encoded += _attributes(3, event.attributes)
        if event.dropped_attributes:
            encoded += b"\x20" + _varint(event.dropped_attributes)
        out.append(_field(11, encoded))
    if span.dropped_events:
        out += (b"\x60", _varint(span.dropped_events))
    for link in span.links:
        encoded = b"\x0a\x10" + link.context.trace_id.to_bytes(16, "big")
        encoded += b"\x12\x08" + link.context.span_id.to_bytes(8, "big") + _attributes(4, link.attributes)
        if link.dropped_attributes:
            encoded += b"\x28" + _varint(link.dropped_attributes)
        out.append(_field(13, encoded + b"\x35" + _FIXED32(_flags(link.context))))
    if span.dropped_links:
        out += (b"\x70", _varint(span.dropped_links))
    status = span.status
    encoded = _field(2, _text(status.description)) if status.description else b""
    if status.status_code.value:
        encoded += b"\x18" + _varint(status.status_code.value)
    out += (_field(15, encoded), b"\x85\x01", _FIXED32(_flags(span.parent)))
    return b"".join(out)


def _text(text: str) -> bytes:
    """A string as UTF-8, a lone surrogate as U+FFFD. A caller's JSON or a backend's error text can hold one (`"\\ud800"`),
    and from there a span's attributes, its status description (an error's text) and its events; the library's
    encoder drops such an attribute, and fails the whole span where one is in a name or a status."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode()


_SURROGATE = re.compile("[\ud800-\udfff]")


def _flags(parent) -> int:
    return _IS_REMOTE_KNOWN | _IS_REMOTE if parent is not None and parent.is_remote else _IS_REMOTE_KNOWN


def _scope(scope) -> bytes:
    if scope is None:
        return b""
    out = _field(1, scope.name.encode()) if scope.name else b""
    if scope.version:
        out += _field(2, scope.version.encode())
    return out + _attributes(3, scope.attributes)


def _attributes(number: int, attributes: Mapping | None) -> bytes:
    """Each attribute as a KeyValue{key = 1, value = 2} in field `number`."""
    if not attributes:
        return b""
    # The SDK's BoundedAttributes reads each item through a lock and the Mapping protocol; its dict, straight.
    attributes = getattr(attributes, "_dict", attributes)
    out = []
    for key, value in attributes.items():
        kind = type(value)
        if kind in _CACHED and (kind is not str or len(value) <= _CACHED_STR):
            cache_key = (number, key, kind, value)  # the type too: True == 1 and hashes alike
            if (encoded := _KEY_VALUES.get(cache_key)) is None:
                if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
                    _KEY_VALUES.clear()
                encoded = _KEY_VALUES[cache_key] = _key_value(number, key, value)
            out.append(encoded)
        else:
            out.append(_key_value(number, key, value))
    return b"".join(out)


def _key_value(number: int, key: str, value) -> bytes:
    return _field(number, _field(1, _text(key)) + _field(2, _value(value)))


# A request's spans repeat most of their attributes (the pool, the backend, the route, the model, rpc.system): each
# (key, value) pair is encoded once and kept, up to _KEY_VALUES_MAX of them (then the lot is dropped and refilled),
# so ids, counts and texts that never repeat cost a pass through the cache at most.
_CACHED = frozenset({str, bool, int})
_CACHED_STR = 64
_KEY_VALUES: dict[tuple, bytes] = {}
_KEY_VALUES_MAX = 4096


def _value(value) -> bytes:
    """An AnyValue: the one field its type says (a oneof, so zero and "" are written too)."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(1, _text(value))
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise TypeError(f"{value} does not fit an int64")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # two's complement on the wire
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if value is None:
        return b""
    if isinstance(value, Sequence):  # ArrayValue{values = 1}
        return _field(5, b"".join(_field(1, _value(v)) for v in value))
    raise TypeError(f"no OTLP encoding here for {type(value).__name__}")


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]
