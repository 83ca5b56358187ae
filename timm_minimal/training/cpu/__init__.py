"""How a run trains on the CPU: the rules (bf16, compilation, threads, processes) and the split's measurement,
launch and worker protocol."""
