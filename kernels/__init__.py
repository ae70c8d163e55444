"""Compute kernels, one file per kernel: a torch `*_ref` that defines the
semantics and runs everywhere, and (added per kernel) a Triton kernel with a
launcher that checks shapes. `dispatch` picks Triton on CUDA, the reference
elsewhere; until a kernel has its Triton version the reference serves both."""
