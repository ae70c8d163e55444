"""Compute kernels, one file per kernel: a torch `*_ref` that defines the
semantics and runs everywhere, a Triton kernel, and a launcher that checks
shapes, dtypes and strides. `dispatch.use_triton` picks Triton on CUDA and the
reference elsewhere (`TANDEM_KERNELS=triton|torch` forces one). Tests run
every Triton kernel on CPU through Triton's interpreter.

With a Triton kernel: paged attention (decode, split over the context, and
prefill), the K/V write, rotary, SiLU-and-mul, RMSNorm with fused residual,
top-k / top-p / min-p sampling, weight-only INT8 matmul. Reference only:
causal attention over a contiguous cache (`attention.py`: the model's path
outside the paged engine, and the ONNX export's). On the CPU the engine's hot
paths are C++ (`csrc/cpu_kernels.cpp`, built once by `cpu_extension.py`).
"""
