// The CPU engine's kernels in C++ (fp32): paged decode attention, and the decoder layer's elementwise
// steps fused into one pass each (RMSNorm, rotary, SiLU-and-multiply). Each has a torch reference in
// tandem_kernels/ with the same semantics; tandem_kernels/cpu_extension.py builds this file, tests compare the two.
//
// Paged decode attention reads each sequence's K/V in place through its block table.
//
// The torch reference (tandem_kernels/paged_attention.py) first gathers every sequence's blocks into a
// contiguous copy, then attends; on a CPU that copy costs more than the attention itself. Here one task
// per (sequence, KV head) walks the blocks and keeps an online softmax for the query heads that share
// the KV head, so K/V are read once and never written. fp32, as the CPU engine runs.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstring>
#include <vector>

// 16 floats (one AVX-512 register; two AVX2 ones, or scalars, where the machine has less).
typedef float v16 __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kMaxGroup = 16, kMaxDimVectors = 16;  // the vector path's limits: 16 query heads per KV head, D 256

static inline v16 load16(const float* p) {
  v16 r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}

// r[i] = sum of the lanes of x[i], for 16 vectors: a tree of shuffles instead of 16 horizontal sums.
static inline v16 transpose_sum(v16 x[kLanes]) {
  const v16i halves_lo = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const v16i halves_hi = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  const v16i quarters_lo = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  const v16i quarters_hi = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  const v16i pairs_lo = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
  const v16i pairs_hi = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
  const v16i evens = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  const v16i odds = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  v16 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)  // [8 lanes of x[2i] | 8 of x[2i+1]]
    a[i] = __builtin_shuffle(x[2 * i], x[2 * i + 1], halves_lo) + __builtin_shuffle(x[2 * i], x[2 * i + 1], halves_hi);
  for (int i = 0; i < 4; ++i)  // 4 lanes each of four x
    b[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], quarters_lo) + __builtin_shuffle(a[2 * i], a[2 * i + 1], quarters_hi);
  for (int i = 0; i < 2; ++i)  // 2 lanes each of eight x
    c[i] = __builtin_shuffle(b[2 * i], b[2 * i + 1], pairs_lo) + __builtin_shuffle(b[2 * i], b[2 * i + 1], pairs_hi);
  return __builtin_shuffle(c[0], c[1], evens) + __builtin_shuffle(c[0], c[1], odds);
}

// One (sequence, KV head) of paged_decode with 16-token blocks and D a multiple of 16. Per query head and
// block, the 16 scores come out as one vector (no horizontal sum per key), so the softmax update runs on
// all 16 at once; values are read once per key for all the query heads.
static void decode_task_vector(const float* qs, const float* kp, const float* vp, const int64_t* table, int64_t len,
                               int64_t G, int64_t D, int64_t head_offset, int64_t block_stride, float scale,
                               float* out) {
  const int64_t C = D / kLanes;
  alignas(64) v16 acc[kMaxGroup * kMaxDimVectors];
  alignas(64) float probs[kMaxGroup][kLanes];
  float m[kMaxGroup], l[kMaxGroup];
  for (int64_t i = 0; i < G * C; ++i) acc[i] = v16{};
  for (int64_t g = 0; g < G; ++g) m[g] = -INFINITY, l[g] = 0.f;
  v16 lane;
  for (int i = 0; i < kLanes; ++i) lane[i] = static_cast<float>(i);
  const v16 minus_inf = v16{} - INFINITY;
  for (int64_t b = 0; b * kLanes < len; ++b) {
    const int64_t n = std::min(kLanes, len - b * kLanes);
    const float* kb = kp + head_offset + table[b] * block_stride;
    const float* vb = vp + head_offset + table[b] * block_stride;
    const v16 valid = v16{} + static_cast<float>(n);
    if ((b + 1) * kLanes < len) {
      // Blocks sit anywhere in the pool, so the hardware prefetcher cannot guess the next one: ask for it
      // now, to arrive while this one is computed.
      const int64_t next = head_offset + table[b + 1] * block_stride;
      for (int64_t i = 0; i < kLanes * D; i += kLanes) {
        __builtin_prefetch(kp + next + i);
        __builtin_prefetch(vp + next + i);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const float* qg = qs + g * D;
      v16 dots[kLanes];
      for (int64_t t = 0; t < kLanes; ++t) {  // rows past n hold stale keys: computed, then masked
        v16 sum = load16(qg) * load16(kb + t * D);
        for (int64_t c = 1; c < C; ++c) sum += load16(qg + c * kLanes) * load16(kb + t * D + c * kLanes);
        dots[t] = sum;
      }
      v16 scores = transpose_sum(dots) * scale;
      scores = lane < valid ? scores : minus_inf;
      float top = m[g];
      for (int i = 0; i < kLanes; ++i) top = std::max(top, scores[i]);
      float* p = probs[g];
      const v16 shifted = scores - top;
      std::memcpy(p, &shifted, sizeof(shifted));
#pragma omp simd
      for (int i = 0; i < kLanes; ++i) p[i] = std::exp(p[i]);  // one vector exp (libmvec), not 16 calls
      float total = 0.f;
      for (int i = 0; i < kLanes; ++i) total += p[i];
      const float correction = std::exp(m[g] - top);
      for (int64_t c = 0; c < C; ++c) acc[g * C + c] *= correction;
      m[g] = top;
      l[g] = l[g] * correction + total;
    }
    for (int64_t t = 0; t < n; ++t) {
      const float* vt = vb + t * D;
      for (int64_t c = 0; c < C; ++c) {
        const v16 v = load16(vt + c * kLanes);
        for (int64_t g = 0; g < G; ++g) acc[g * C + c] += probs[g][t] * v;
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float inverse = 1.f / l[g];
    for (int64_t c = 0; c < C; ++c) {
      const v16 o = acc[g * C + c] * inverse;
      std::memcpy(out + g * D + c * kLanes, &o, sizeof(o));
    }
  }
}

// q [S, H, D]; k_cache, v_cache [KVH, blocks, block_size, D]; tables [S, W] int64; lens [S] int64.
torch::Tensor paged_decode(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                           const torch::Tensor& tables, const torch::Tensor& lens, double scale) {
  TORCH_CHECK(q.dtype() == torch::kFloat32 && k_cache.dtype() == torch::kFloat32 && v_cache.dtype() == torch::kFloat32,
              "paged_decode: fp32 only");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous(), "paged_decode: contiguous");
  TORCH_CHECK(tables.dtype() == torch::kInt64 && lens.dtype() == torch::kInt64, "paged_decode: int64 tables, lens");
  const int64_t S = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t KVH = k_cache.size(0), BS = k_cache.size(2), W = tables.size(1);
  TORCH_CHECK(H % KVH == 0 && k_cache.size(3) == D, "paged_decode: head shapes");
  const int64_t G = H / KVH;
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const auto tables_c = tables.contiguous(), lens_c = lens.contiguous();  // held: the pointers below need them
  const int64_t* tp = tables_c.data_ptr<int64_t>();
  const int64_t* lp = lens_c.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const int64_t head_stride = k_cache.stride(0), block_stride = k_cache.stride(1);
  const float fscale = static_cast<float>(scale);
#if defined(__AVX512F__)  // 16-lane shuffles are single instructions only with AVX-512; elsewhere they cost more
  const bool vector_path = BS == kLanes && D % kLanes == 0 && D / kLanes <= kMaxDimVectors && G <= kMaxGroup;
#else
  const bool vector_path = false;
#endif
  if (vector_path) {
    at::parallel_for(0, S * KVH, 1, [&](int64_t begin, int64_t end) {
      for (int64_t work = begin; work < end; ++work) {
        const int64_t s = work / KVH, kvh = work % KVH;
        decode_task_vector(qp + (s * H + kvh * G) * D, kp, vp, tp + s * W, lp[s], G, D, kvh * head_stride,
                           block_stride, fscale, op + (s * H + kvh * G) * D);
      }
    });
    return out;
  }
  at::parallel_for(0, S * KVH, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(G * D), m(G), l(G), scores(G * BS);
    for (int64_t work = begin; work < end; ++work) {
      const int64_t s = work / KVH, kvh = work % KVH, len = lp[s];
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.f);
      const float* qs = qp + (s * H + kvh * G) * D;
      for (int64_t b = 0; b * BS < len; ++b) {
        const int64_t n = std::min(BS, len - b * BS);
        const float* kb = kp + kvh * head_stride + tp[s * W + b] * block_stride;
        const float* vb = vp + kvh * head_stride + tp[s * W + b] * block_stride;
        for (int64_t g = 0; g < G; ++g) {
          const float* qg = qs + g * D;
          float top = m[g];
          for (int64_t t = 0; t < n; ++t) {
            const float* kt = kb + t * D;
            float dot = 0.f;
            for (int64_t d = 0; d < D; ++d) dot += qg[d] * kt[d];
            scores[g * BS + t] = dot * fscale;
            top = std::max(top, scores[g * BS + t]);
          }
          const float correction = std::exp(m[g] - top);
          float* ag = acc.data() + g * D;
          float* p = scores.data() + g * BS;
          float total = 0.f;
          for (int64_t t = 0; t < n; ++t) p[t] = std::exp(p[t] - top);  // its own loop: vectorised exp
          for (int64_t t = 0; t < n; ++t) total += p[t];
          for (int64_t d = 0; d < D; ++d) ag[d] *= correction;
          for (int64_t t = 0; t < n; ++t) {
            const float pt = p[t];
            const float* vt = vb + t * D;
            for (int64_t d = 0; d < D; ++d) ag[d] += pt * vt[d];
          }
          m[g] = top;
          l[g] = l[g] * correction + total;
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* o = op + (s * H + kvh * G + g) * D;
        const float inverse = 1.f / l[g];
        for (int64_t d = 0; d < D; ++d) o[d] = acc[g * D + d] * inverse;
      }
    }
  });
  return out;
}

// Rows small enough run on one thread: a parallel region costs more than it saves below this many floats.
constexpr int64_t kGrainFloats = 1 << 15;

static int64_t grain_rows(int64_t row_floats) { return std::max<int64_t>(1, kGrainFloats / std::max<int64_t>(1, row_floats)); }

static void check_fp32_contiguous(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.dtype() == torch::kFloat32, what, ": fp32 CPU tensors only");
  TORCH_CHECK(t.is_contiguous(), what, ": contiguous tensors only");
}

// h = x (+ residual); out = weight * (h / sqrt(mean(h^2) + eps)), over the last dimension. Returns (out, h).
std::tuple<torch::Tensor, torch::Tensor> rms_norm(const torch::Tensor& x, const c10::optional<torch::Tensor>& residual,
                                                  const torch::Tensor& weight, double eps) {
  check_fp32_contiguous(x, "rms_norm");
  check_fp32_contiguous(weight, "rms_norm");
  const int64_t hidden = x.size(-1), rows = x.numel() / std::max<int64_t>(1, hidden);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "rms_norm: weight must be [hidden]");
  const bool has_residual = residual.has_value();
  if (has_residual) {
    check_fp32_contiguous(*residual, "rms_norm");
    TORCH_CHECK(residual->sizes() == x.sizes(), "rms_norm: residual must have x's shape");
  }
  auto out = torch::empty_like(x);
  auto h = has_residual ? torch::empty_like(x) : x;
  const float* xp = x.data_ptr<float>();
  const float* rp = has_residual ? residual->data_ptr<float>() : nullptr;
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* hp = h.data_ptr<float>();
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, rows, grain_rows(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * hidden;
      float* hr = hp + r * hidden;
      if (has_residual) {
        const float* rr = rp + r * hidden;
        for (int64_t i = 0; i < hidden; ++i) hr[i] = xr[i] + rr[i];
      }
      const float* src = has_residual ? hr : xr;
      float squares = 0.f;
      for (int64_t i = 0; i < hidden; ++i) squares += src[i] * src[i];
      const float inverse = 1.f / std::sqrt(squares / static_cast<float>(hidden) + feps);
      float* orow = op + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) orow[i] = wp[i] * (src[i] * inverse);
    }
  });
  return {out, h};
}

// x [B, T, H, D] (a projection's output, heads not yet moved forward), cos/sin [B, T, D]:
// out = x * cos + rotate_half(x) * sin, with rotate_half(x) = cat(-x[D/2:], x[:D/2]) (HF Llama).
torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  check_fp32_contiguous(x, "rotary");
  check_fp32_contiguous(cos, "rotary");
  check_fp32_contiguous(sin, "rotary");
  TORCH_CHECK(x.dim() == 4 && cos.dim() == 3 && cos.sizes() == sin.sizes(), "rotary: x [B, T, H, D], cos/sin [B, T, D]");
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  TORCH_CHECK(D % 2 == 0 && cos.size(0) == B && cos.size(1) == T && cos.size(2) == D, "rotary: shapes");
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * T, grain_rows(H * D), [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const float* c = cp + bt * D;
      const float* s = sp + bt * D;
      for (int64_t h = 0; h < H; ++h) {
        const float* x1 = xp + (bt * H + h) * D;
        const float* x2 = x1 + half;
        float* o1 = op + (bt * H + h) * D;
        float* o2 = o1 + half;
        for (int64_t i = 0; i < half; ++i) o1[i] = x1[i] * c[i] + (-x2[i]) * s[i];
        for (int64_t i = 0; i < half; ++i) o2[i] = x2[i] * c[half + i] + x1[i] * s[half + i];
      }
    }
  });
  return out;
}

// silu(gate) * up, elementwise.
torch::Tensor silu_and_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  check_fp32_contiguous(gate, "silu_and_mul");
  check_fp32_contiguous(up, "silu_and_mul");
  TORCH_CHECK(gate.sizes() == up.sizes(), "silu_and_mul: gate and up must have one shape");
  auto out = torch::empty_like(gate);
  const float* gp = gate.data_ptr<float>();
  const float* up_ = up.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, gate.numel(), kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) op[i] = gp[i] / (1.f + std::exp(-gp[i])) * up_[i];
  });
  return out;
}

// Each releases the GIL while it runs, as torch's own ops do: the worker's event loop keeps streaming
// tokens while the engine thread computes.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = py::call_guard<py::gil_scoped_release>;
  m.def("paged_decode", &paged_decode, "paged decode attention over block tables (fp32, CPU)", release());
  m.def("rms_norm", &rms_norm, "RMSNorm with an optional fused residual add: (out, h) (fp32, CPU)", release());
  m.def("rotary", &rotary, "rotary embedding on [B, T, H, D] (fp32, CPU)", release());
  m.def("silu_and_mul", &silu_and_mul, "silu(gate) * up (fp32, CPU)", release());
}
