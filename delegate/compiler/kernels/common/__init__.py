"""Kernel pieces and generic kernels either kernel family uses."""
