"""The process a run lives in: ranks and collectives under torchrun (`distributed`), the GPU's figures
(`hardware`) and stop signals (`stopping`). Imports nothing else of gspo_bench."""
