"""Where prefix hints live in Redis: the contract between workers (writers) and gateways (readers).

One sorted set per (model, block hash): its members are the workers holding the block, each scored with the
time (Redis's clock, ms) its hint expires. A worker re-scores the blocks it holds every TTL/3, removes a block it
evicts, and removes all of its own on a clean shutdown; a dead worker's members fall out by score (readers skip
them, writers clear them) and the key itself expires at the latest expiry any write gave it. A gateway asks, in one
script call over the prompt's block keys, how many leading blocks each of its candidates holds: the script bisects
the blocks, so the work grows with the log of the prompt's length and with the candidates holding its prefix, not
with the pool (keying by worker made a gateway read every worker's first block on every request, ~1 ms at 256
workers). Memory is one member per (cached block, worker), bounded by the workers' KV pools.

The scripts run with Redis's own clock (TIME), so the hosts' clocks need not agree.
"""

import functools
import re
from collections.abc import Sequence
from urllib.parse import urlparse

KEY_PREFIX = "tandem:kvb"  # `tandem:kv` held one key per (worker, block) before: a gateway does not read those
DEFAULT_HINT_TTL_S = 30.0

_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
# Writes: KEYS the blocks' keys; ARGV the worker, the TTL in ms, and "gt" (a worker's own hint: add the member, or
# push its expiry later) or "nx" (a gateway's pending hint: add the member only where it is none yet, so it never
# shortens a worker's). Expired members go first; the key's expiry becomes the later of its own and now + TTL. A
# key of another type under the hints' prefix (anyone who can write to the Redis) is replaced: it failed the whole
# call, every hint after it in the batch unwritten, and the worker took Redis for down (a review).
# `#!lua` (a script that writes): Redis refuses it, as it would a SET, when it is out of memory under noeviction.
HOLD_SCRIPT = (
    "#!lua\n"
    + _NOW_MS
    + """
local expires = now + tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  local kept = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now)
  if type(kept) == 'table' and kept.err then redis.call('DEL', key) end
  if ARGV[3] == 'nx' then redis.call('ZADD', key, 'NX', expires, ARGV[1])
  else redis.call('ZADD', key, 'GT', expires, ARGV[1]) end
  redis.call('PEXPIRE', key, ARGV[2], 'NX')
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
end
return #KEYS
"""
)
# Reads: ARGV[1] the candidate workers, each followed by a comma, ARGV[2] how many, ARGV[3] the blocks' key prefix
# (`tandem:kvb:<model>:`), ARGV[4] the prompt's block hashes in order as one string, ARGV[5] the bytes of one
# (HASH_BYTES). One argument each, not one per worker or per block: at 256 candidates, Redis reading 256 arguments and
# building them into Lua strings was ~100 µs of a ~250 µs lookup; the prompt's block keys, sent one each, cost the
# gateway ~0.35 µs a block to format and pack and Redis as much to read (~90 µs at 256 blocks, bench/scaling.py), where
# the script reads the keys of log2(blocks) of them. It names those keys itself (prefix .. hex(hash)): on one Redis,
# where the hints live, a script may read keys it was not given (a Redis Cluster could not hold the hints' multi-key
# scripts anyway). Returns [worker, leading blocks held, ...] for the candidates holding the first block. A worker's
# holdings are a prefix of the prompt's blocks (a block's
# hash covers its whole prefix, and the engine evicts a prefix's tail first, so it never keeps a block without the
# ones before it), so the script bisects: it splits the workers on whether they hold the middle block of the range
# each is known to end in, one ZMSCORE per split. The calls are log2(blocks) per group of workers ending at the same
# block (8 for 256 blocks where a linear walk made 256, at ~5 µs a call in Redis), whoever else holds the blocks. On
# holdings with a gap (a hint expired or lost mid-prefix), the answer is a block the worker holds with the next one
# not held, at least its leading run: at worst a score too high for a cache miss part of the way, never a wrong
# answer. The first block's holders are listed when they are fewer than the candidates; up to FEW_HOLDERS of them
# are looked for in the candidates' string as it is, more in a table of the candidates. A key of another type under
# the prefix holds no worker: it made every lookup of its prompts fail, and each gateway then took Redis for down
# for hints and rate limits alike (a review).
FEW_HOLDERS = 32
MATCH_SCRIPT = (
    "#!lua flags=no-writes\n"
    + _NOW_MS
    + """
local prefix, hashes = ARGV[3], ARGV[4]
local size = tonumber(ARGV[5])
local blocks = math.floor(#hashes / size)
local hex = string.rep('%02x', size)
local keys = {}
local function key(i)
  local k = keys[i]
  if not k then
    local at = (i - 1) * size
    k = prefix .. string.format(hex, string.byte(hashes, at + 1, at + size))
    keys[i] = k
  end
  return k
end
local function split(block_key, workers)
  local held, missing = {}, {}
  for start = 1, #workers, 1000 do
    local slice = {unpack(workers, start, math.min(start + 999, #workers))}
    local scores = redis.pcall('ZMSCORE', block_key, unpack(slice))
    if scores.err then scores = {} end
    for j = 1, #slice do
      local score = scores[j]
      if score and tonumber(score) > now then held[#held + 1] = slice[j] else missing[#missing + 1] = slice[j] end
    end
  end
  return held, missing
end
local depth = {}
-- every one of workers holds block lo and none holds block hi (hi = blocks + 1: past the prompt)
local function bisect(lo, hi, workers)
  while #workers > 0 do
    if hi - lo <= 1 then
      for _, worker in ipairs(workers) do depth[worker] = lo end
      return
    end
    local mid = math.floor((lo + hi) / 2)
    local held, missing = split(key(mid), workers)
    bisect(mid, hi, held)
    workers, hi = missing, mid
  end
end
local function listed()
  local workers = {}
  for worker in string.gmatch(ARGV[1], '([^,]+),') do workers[#workers + 1] = worker end
  return workers
end
local first = {}
local count = tonumber(ARGV[2])
local holders = blocks > 0 and redis.pcall('ZCARD', key(1)) or 0
if type(holders) == 'table' then holders = 0 end
if holders > 0 and holders < count then
  local alive = redis.call('ZRANGE', key(1), '(' .. now, '+inf', 'BYSCORE')
  if #alive <= """
    + str(FEW_HOLDERS)
    + """ then
    local candidates = ',' .. ARGV[1]
    for _, worker in ipairs(alive) do
      if string.find(candidates, ',' .. worker .. ',', 1, true) then first[#first + 1] = worker end
    end
  else
    local wanted = {}
    for _, worker in ipairs(listed()) do wanted[worker] = true end
    for _, worker in ipairs(alive) do
      if wanted[worker] then first[#first + 1] = worker end
    end
  end
elseif holders > 0 then
  first = split(key(1), listed())
end
bisect(1, blocks + 1, first)
local out = {}
for worker, n in pairs(depth) do out[#out + 1] = worker out[#out + 1] = n end
return out
"""
)


def match_args(worker_ids: Sequence[str]) -> list:
    """MATCH_SCRIPT's first two ARGV, for these candidates (the key prefix and the hashes follow them)."""
    return ["".join(f"{w}," for w in worker_ids), len(worker_ids)]


def key_prefix(model_id: str) -> str:
    """What every block key of this model starts with: block_key is this and the hash in hex."""
    return f"{KEY_PREFIX}:{model_id}:"


MIN_REDIS_VERSION = (7, 0)  # ZADD GT, ZMSCORE, PEXPIRE NX|GT, and the scripts' `#!lua` flags


def too_old(redis_version: str) -> str | None:
    """Why a Redis of this version (INFO's `redis_version`) cannot hold the hints, or None when it can: an old one
    refuses the scripts with a compile or syntax error that says nothing of versions."""
    try:
        version = tuple(int(part) for part in redis_version.split(".")[:2])
    except ValueError:
        return None  # not a version we can read (a fork): let its own errors speak
    if version >= MIN_REDIS_VERSION:
        return None
    need = ".".join(map(str, MIN_REDIS_VERSION))
    return (
        f"Redis {redis_version} is older than {need}: prefix hints need ZADD GT, ZMSCORE and PEXPIRE NX|GT "
        f"(Redis {need} or newer)"
    )


def block_key(model_id: str, block_hash: bytes) -> str:
    return f"{key_prefix(model_id)}{block_hash.hex()}"


@functools.lru_cache(maxsize=65536)  # per candidate per lookup: parsing the URL each time was 3 ms at 256 workers
def worker_id_for(endpoint: str) -> str:
    """A worker's id is the host:port the gateway dials (grpc://host:port or host:port), `localhost` read as
    127.0.0.1 (a policy naming grpc://localhost:50051 found no hint of the worker publishing 127.0.0.1:50051), an
    IPv6 host unbracketed (`fd00::5:50051` for grpc://[fd00::5]:50051). `--worker-id` may name an IPv6 host without
    brackets, as `$(POD_IP):50051` does on an IPv6 cluster (it stopped the worker at start: a review). ValueError
    for a port that is no number."""
    address = endpoint.split("://", 1)[1] if "://" in endpoint else endpoint
    netloc, path = re.match(r"([^/?#]*)(.*)", address, re.DOTALL).groups()  # a colon in a path is no host's
    if netloc.count(":") > 1 and not netloc.startswith("["):  # an IPv6 host: its port is after the last colon
        host, _, port = netloc.rpartition(":")
        netloc = f"[{host}]:{port}"
    try:
        parsed = urlparse(f"grpc://{netloc}{path}")
        port = parsed.port
    except ValueError:  # a port that is no number, or an address that is none
        raise ValueError(
            f"{endpoint!r}: no host:port (a worker id is the address gateways dial: 10.0.0.5:50051)"
        ) from None
    host = "127.0.0.1" if parsed.hostname == "localhost" else parsed.hostname
    return f"{host}:{port}"


def given_worker_id(value: str) -> str:
    """`--worker-id` as a worker publishes under it: ValueError where it names no port (`10.0.0.5` published
    `10.0.0.5:None`, which no gateway matches: prefix routing did nothing, silently; a review)."""
    worker_id = worker_id_for(value)
    if worker_id.endswith(":None") or worker_id.startswith("None:"):
        raise ValueError(f"{value!r}: no host:port (a worker id is the address gateways dial: 10.0.0.5:50051)")
    return worker_id


def default_worker_id(host: str, port: int) -> str:
    """The id a worker listening on host:port publishes its hints under, unless told (--worker-id): the address a
    gateway on this host dials (a wildcard listen address, `::` or `[::]` too, is 127.0.0.1 here)."""
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]", "") else host
    return worker_id_for(f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}")
