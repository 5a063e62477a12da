# (filled by the CUDA backend work)
