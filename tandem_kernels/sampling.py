"""Top-k / top-p / min-p sampling with per-row parameters and counter-based seeds.

Semantics (HF's warpers, in this order): logits / temperature; top-k keeps
the k largest; softmax; top-p keeps the smallest set of most likely tokens
whose probability reaches top_p; min-p drops tokens below min_p times the
top probability. The draw is an exponential race: the token maximising
p / E with E = -log(u), which samples exactly from the kept distribution.
u for token v of a row is a hash of (seed, step, v), so a seeded row draws
the same token in any batch, on any device, through either implementation.

`sample_ref` sorts only the rows that ask for top-p (torch.sort), the way
most engines do. The Triton kernel never sorts: one program per row finds
each cut-off by a 16-way search over the float bit patterns (8 counting
passes over the vocabulary for the k-th largest logit, 8 summing passes for
the top-p boundary, each testing 16 thresholds at once), which yields the
exact order statistic FlashInfer's pivot search approximates, then makes one
pass for the race.
"""

import functools

import torch

from tandem_kernels.dispatch import check, use_triton

_MASK32 = 0xFFFFFFFF


def masked_probs_ref(logits, temperature, top_k, top_p, min_p) -> torch.Tensor:
    """[S, vocab] float32: the distribution each row samples from (zeros where masked)."""
    temperature = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    scaled = logits.float() / temperature.unsqueeze(1)
    vocab = scaled.shape[1]
    top_k = torch.where((top_k > 0) & (top_k < vocab), top_k, torch.zeros_like(top_k))
    if bool((top_k > 0).any()):
        largest = torch.topk(scaled, int(top_k.max()), dim=-1).values
        kth = largest.gather(1, (top_k.clamp(min=1) - 1).unsqueeze(1))
        scaled = scaled.masked_fill((top_k > 0).unsqueeze(1) & (scaled < kth), float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    rows = (top_p < 1).nonzero().squeeze(1)
    if rows.numel():
        probs[rows] = _top_p(probs[rows], top_p[rows])
    if bool((min_p > 0).any()):
        floor = min_p.unsqueeze(1) * probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < floor, 0.0)
    return probs


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
    # Keep the most likely tokens until their mass reaches top_p (the first always stays), and every token as
    # likely as the last one kept: which of equal probabilities a sort puts first must not decide what is drawn
    # (bf16 logits tie often), and the kernel's cut-off, an order statistic, keeps them all the same way.
    kept_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p.unsqueeze(1)
    kept_sorted[:, 0] = True  # (top_p 0 would otherwise drop everything)
    last = kept_sorted.sum(dim=-1, keepdim=True) - 1
    return probs.masked_fill(probs < sorted_probs.gather(1, last), 0.0)


def row_hashes(seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """[S] int64 < 2**32: the per-row half of the counter hash."""
    return _hash32(_hash32(_hash32(seed & _MASK32) ^ (seed >> 32)) ^ (step & _MASK32))


def uniforms(seed: torch.Tensor, step: torch.Tensor, vocab: int) -> torch.Tensor:
    """[S, vocab] float64 uniforms in (0, 1), a pure function of (seed, step, token id)."""
    token = torch.arange(vocab, device=seed.device, dtype=torch.int64) * 0x9E3779B1 & _MASK32
    bits = _hash32(_hash32(row_hashes(seed, step).unsqueeze(1) ^ token))
    return (bits.double() + 0.5) / 2.0**32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (values < 2**32 held in int64, so products never overflow)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def sample_ref(logits, temperature, top_k, top_p, min_p, seed, step) -> torch.Tensor:
    """[S] int64 token ids drawn from each row's masked distribution (temperature 0 counts as 1 here)."""
    probs = masked_probs_ref(logits, temperature, top_k, top_p, min_p)
    exponential = -torch.log(uniforms(seed, step, logits.shape[1]))
    return (probs / exponential).argmax(dim=-1)


_order_key = _hash32_jit = _scaled_logits = (
    None  # the kernel's @triton.jit helpers, defined with it (triton is imported lazily)
)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def order_key(x):
        """An int32 that orders as the float32 x does (negative floats have their magnitude bits flipped)."""
        bits = x.to(tl.int32, bitcast=True)
        return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)

    @triton.jit
    def hash32(x):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
        x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
        return (x >> 16) ^ x

    @triton.jit
    def scaled_logits(base, idx, vocab, temperature):
        """One block of a row's logits / temperature, -inf past the vocabulary (every pass reads this)."""
        return tl.load(base + idx, mask=idx < vocab, other=float("-inf")).to(tl.float32) / temperature

    # A kernel finds the functions it calls among its module's globals (compiled or interpreted).
    global _order_key, _hash32_jit, _scaled_logits
    _order_key, _hash32_jit, _scaled_logits = order_key, hash32, scaled_logits

    @triton.jit
    def sample_kernel(
        logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, row_hash_ptr, out_ptr,
        vocab, stride_row, BLOCK: tl.constexpr, SEARCH_BLOCK: tl.constexpr, WAYS: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)
        base = logits_ptr + row * stride_row
        temperature = tl.load(temperature_ptr + row)
        temperature = tl.where(temperature > 0, temperature, 1.0)
        top_k = tl.load(top_k_ptr + row)
        top_p = tl.load(top_p_ptr + row)
        min_p = tl.load(min_p_ptr + row)
        offsets = tl.arange(0, BLOCK)
        search = tl.arange(0, SEARCH_BLOCK)

        # Pass 1: the largest and smallest scaled logit (as order keys) and the maximum itself.
        top = tl.full((), float("-inf"), tl.float32)
        low_key = tl.full((), 2147483647, tl.int32)
        high_key = tl.full((), -2147483648, tl.int32)
        for start in range(0, vocab, BLOCK):
            idx = start + offsets
            valid = idx < vocab
            s = _scaled_logits(base, idx, vocab, temperature)
            keys = _order_key(s)
            top = tl.maximum(top, tl.max(s, axis=0))
            low_key = tl.minimum(low_key, tl.min(tl.where(valid, keys, 2147483647), axis=0))
            high_key = tl.maximum(high_key, tl.max(tl.where(valid, keys, -2147483648), axis=0))

        # Top-k: the largest key t with at least k logits >= t is the k-th largest logit. Each pass counts the
        # logits at or above WAYS thresholds spread over [lo, hi] at once and keeps the sixteenth of the range
        # that holds t: 8 passes over the vocabulary for 32 bits, where halving took 33.
        ways = tl.arange(0, WAYS)
        k_cut = low_key.to(tl.int64)
        if (top_k > 0) & (top_k < vocab):
            lo, hi = low_key.to(tl.int64), high_key.to(tl.int64)
            for _ in range(8):
                step = (hi - lo + WAYS) // WAYS
                cuts = lo + ways.to(tl.int64) * step
                usable = cuts <= hi
                cuts32 = tl.minimum(cuts, hi).to(tl.int32)  # within [lo, hi], so within int32
                count = tl.zeros((WAYS,), tl.int64)
                for start in range(0, vocab, SEARCH_BLOCK):
                    idx = start + search
                    keys = _order_key(_scaled_logits(base, idx, vocab, temperature))
                    above = (keys[:, None] >= cuts32[None, :]) & (idx < vocab)[:, None]
                    count += tl.sum(above.to(tl.int64), axis=0)
                way = tl.max(tl.where(usable & (count >= top_k), ways, 0), axis=0)  # way 0 (= lo) always holds
                lo = lo + way.to(tl.int64) * step
                hi = tl.minimum(hi, lo + step - 1)
            k_cut = lo

        # The softmax normaliser over the tokens top-k keeps.
        total = tl.zeros((), tl.float32)
        for start in range(0, vocab, BLOCK):
            idx = start + offsets
            s = _scaled_logits(base, idx, vocab, temperature)
            kept = (idx < vocab) & (_order_key(s).to(tl.int64) >= k_cut)
            total += tl.sum(tl.where(kept, tl.exp(s - top), 0.0), axis=0)
        p_max = 1.0 / total

        # Top-p: the largest probability t whose tokens with p >= t reach top_p (searched on the bits of p >= 0,
        # WAYS thresholds a pass, as for top-k).
        p_cut = tl.zeros((), tl.int64)
        if top_p < 1.0:
            lo = tl.zeros((), tl.int64)
            hi = p_max.to(tl.int32, bitcast=True).to(tl.int64)
            for _ in range(8):
                step = (hi - lo + WAYS) // WAYS
                cuts = lo + ways.to(tl.int64) * step
                usable = cuts <= hi
                cuts32 = tl.minimum(cuts, hi).to(tl.int32)
                mass = tl.zeros((WAYS,), tl.float32)
                for start in range(0, vocab, SEARCH_BLOCK):
                    idx = start + search
                    s = _scaled_logits(base, idx, vocab, temperature)
                    kept = (idx < vocab) & (_order_key(s).to(tl.int64) >= k_cut)
                    p = tl.where(kept, tl.exp(s - top) / total, 0.0)
                    bits = p.to(tl.int32, bitcast=True)
                    mass += tl.sum(tl.where(bits[:, None] >= cuts32[None, :], p[:, None], 0.0), axis=0)
                way = tl.max(tl.where(usable & (mass >= top_p), ways, 0), axis=0)
                lo = lo + way.to(tl.int64) * step
                hi = tl.minimum(hi, lo + step - 1)
            p_cut = lo
        floor = min_p * p_max

        # The race: argmax of p / E over kept tokens, E = -log(u), u from the counter hash.
        row_hash = tl.load(row_hash_ptr + row)
        best = tl.full((), -1.0, tl.float64)
        best_idx = tl.zeros((), tl.int64)
        for start in range(0, vocab, BLOCK):
            idx = start + offsets
            s = _scaled_logits(base, idx, vocab, temperature)
            p = tl.exp(s - top) / total
            kept = (idx < vocab) & (_order_key(s).to(tl.int64) >= k_cut)
            kept = kept & (p.to(tl.int32, bitcast=True).to(tl.int64) >= p_cut) & (p >= floor)
            token = (idx.to(tl.int64) * 0x9E3779B1) & 0xFFFFFFFF
            bits = _hash32_jit(_hash32_jit(row_hash ^ token))
            u = (bits.to(tl.float64) + 0.5) / 4294967296.0
            score = tl.where(kept, p.to(tl.float64) / -tl.log(u), -1.0)
            chunk_best = tl.max(score, axis=0)
            chunk_idx = tl.argmax(score, axis=0).to(tl.int64) + start
            better = chunk_best > best  # strict: the earliest index wins a tie, as torch.argmax
            best_idx = tl.where(better, chunk_idx, best_idx)
            best = tl.where(better, chunk_best, best)
        tl.store(out_ptr + row, best_idx)

    return sample_kernel


def sample_triton(logits, temperature, top_k, top_p, min_p, seed, step, block: int = 1024) -> torch.Tensor:
    rows, vocab = logits.shape
    check(logits.dim() == 2 and logits.stride(1) == 1, "logits: [rows, vocab], each row contiguous")
    check(logits.dtype in (torch.float32, torch.float16, torch.bfloat16), f"logits dtype {logits.dtype}")
    for name, tensor, dtype in (
        ("temperature", temperature, torch.float32),
        ("top_k", top_k, torch.int64),
        ("top_p", top_p, torch.float32),
        ("min_p", min_p, torch.float32),
        ("seed", seed, torch.int64),
        ("step", step, torch.int64),
    ):
        check(
            tensor.shape == (rows,) and tensor.dtype == dtype,
            f"{name}: [{rows}] {dtype}, got {tuple(tensor.shape)} {tensor.dtype}",
        )
    check(block & (block - 1) == 0, "block: a power of two")
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    _kernel()[(rows,)](
        logits, temperature, top_k, top_p, min_p, row_hashes(seed, step).contiguous(), out,
        vocab, logits.stride(0), BLOCK=block, SEARCH_BLOCK=min(block, 256), WAYS=16,
    )  # fmt: skip
    return out


def sample(logits, temperature, top_k, top_p, min_p, seed, step) -> torch.Tensor:
    if use_triton(logits):
        return sample_triton(logits, temperature, top_k, top_p, min_p, seed, step)
    return sample_ref(logits, temperature, top_k, top_p, min_p, seed, step)
