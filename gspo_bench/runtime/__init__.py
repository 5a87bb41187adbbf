"""The process a run lives in: ranks and collectives under torchrun (`distributed`), the GPU's figures
(`hardware`), stop signals (`stopping`) and the CPU kernels and thread counts it computes with
(`kernels`). Imports nothing else of gspo_bench."""
