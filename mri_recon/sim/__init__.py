"""Simulation: analytic phantoms, trajectories and simulated scans."""
