"""Iterative solvers: conjugate gradients on NumPy and CuPy arrays."""
