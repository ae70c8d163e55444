// Paged decode attention for CPU: reads each sequence's K/V in place through its block table.
//
// The torch reference (kernels/paged_attention.py) first gathers every sequence's blocks into a
// contiguous copy, then attends; on a CPU that copy costs more than the attention itself. Here one task
// per (sequence, KV head) walks the blocks and keeps an online softmax for the query heads that share
// the KV head, so K/V are read once and never written. fp32, as the CPU engine runs.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

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
  const int64_t* tp = tables.contiguous().data_ptr<int64_t>();
  const int64_t* lp = lens.contiguous().data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const int64_t head_stride = k_cache.stride(0), block_stride = k_cache.stride(1);
  const float fscale = static_cast<float>(scale);
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention over block tables (fp32, CPU)");
}
