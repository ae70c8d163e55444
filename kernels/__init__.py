"""Compute kernels, one file per kernel: a torch `*_ref` that defines the
semantics and runs everywhere, a Triton kernel, and a launcher that checks
shapes, dtypes and strides. `dispatch.use_triton` picks Triton on CUDA and the
reference elsewhere (`TANDEM_KERNELS=triton|torch` forces one). Tests run
every Triton kernel on CPU through Triton's interpreter.

Built: paged decode attention, the K/V write, rotary, SiLU-and-mul, RMSNorm
with fused residual. References only so far: paged prefill attention, the
sampler, INT8 matmul.
"""
