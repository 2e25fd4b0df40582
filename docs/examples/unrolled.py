"""A worked example of docs/torch.md: a few unrolled gradient iterations of SENSE with learnable step sizes and
Tikhonov weights, trained for ten steps on simulated scans.

The operator is :class:`mri_recon.torch.TorchEncoding` (the encoding operator of docs/architecture.md, "The
operator protocol", on torch tensors with autograd): the network is

    x_0 = 0,   x_{k+1} = x_k - a_k (A^H W (A x_k - y) + l_k x_k),   k = 0 .. K-1

with ``A^H W A`` the operator's Toeplitz normal, ``a_k = s_k / L`` (L the largest eigenvalue of ``A^H W A``,
by power iteration) and ``s_k``, ``l_k`` learned through their logarithms. The loss is the relative squared
error against the phantom; the gradients reach ``s_k`` and ``l_k`` through the operator's backward (its
adjoint). Scans: golden-angle radial Shepp-Logan phantoms of :func:`mri_recon.sim.simulate.simulate_scan`,
one trajectory, the noise drawn anew per scan. Runs in seconds on a laptop's CPU::

    python docs/examples/unrolled.py
"""

from __future__ import annotations

import numpy as np
import torch

from mri_recon.sim.simulate import simulate_scan
from mri_recon.torch import TorchEncoding

MATRIX, COILS, SPOKES, ITERATIONS = (48, 48), 4, 24, 5


def scans(seeds: list[int]) -> tuple[TorchEncoding, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The operator of the shared trajectory (its maps and weights W), W, the k-space ``(S, C, M)`` of each
    seed and the phantom ``(S, *MATRIX)``."""
    simulated = [simulate_scan(MATRIX, "golden", coils=COILS, spokes=SPOKES, snr=30.0, seed=s) for s in seeds]
    first = simulated[0]
    op = TorchEncoding(first.trajectory, MATRIX, maps=first.coil_maps, weights=first.weights)
    kspace = torch.from_numpy(np.stack([s.kspace for s in simulated]))
    truth = torch.from_numpy(np.stack([s.ground_truth for s in simulated]).astype(np.complex64))
    return op, torch.from_numpy(first.weights), kspace, truth


def largest_eigenvalue(op: TorchEncoding, iterations: int = 20) -> float:
    """The largest eigenvalue of the normal operator, by power iteration from a fixed start."""
    x = torch.ones(op.image_shape, dtype=torch.complex64)
    with torch.no_grad():
        for _ in range(iterations):
            x = op.normal(x)
            norm = x.norm()
            x = x / norm
    return float(norm)


class Unrolled(torch.nn.Module):
    """``ITERATIONS`` gradient steps on ``||A x - y||_W^2 + l ||x||^2``, step sizes and weights learned."""

    def __init__(self, op: TorchEncoding, weights: torch.Tensor, iterations: int = ITERATIONS) -> None:
        super().__init__()
        self.op, self.weights, self.scale = op, weights, 1.0 / largest_eigenvalue(op)
        self.log_step = torch.nn.Parameter(torch.full((iterations,), float(np.log(0.5))))
        self.log_lam = torch.nn.Parameter(torch.full((iterations,), float(np.log(1e-3))))

    def forward(self, kspace: torch.Tensor) -> torch.Tensor:
        rhs = self.op.H(self.weights * kspace)  # A^H W y for the batch (S, C, M)
        x = torch.zeros_like(rhs)
        for step, lam in zip(self.log_step.exp(), self.log_lam.exp() / self.scale):
            x = x - step * self.scale * (self.op.normal(x) - rhs + lam * x)
        return x


def loss_of(model: Unrolled, kspace: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """The mean relative squared error of the reconstructions."""
    error = (model(kspace) - truth).abs().square().sum(dim=(-2, -1))
    return (error / truth.abs().square().sum(dim=(-2, -1))).mean()


def train(steps: int = 10, seeds: tuple[int, ...] = (1, 2, 3), held_out: int = 9) -> dict[str, list[float]]:
    """Train on the scans of ``seeds`` for ``steps`` Adam steps; the training loss at each step and the loss of
    the scan of ``held_out`` before and after."""
    torch.manual_seed(0)
    op, weights, kspace, truth = scans([*seeds, held_out])
    model = Unrolled(op, weights)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.2)
    with torch.no_grad():
        before = float(loss_of(model, kspace[-1:], truth[-1:]))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model, kspace[:-1], truth[:-1])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = float(loss_of(model, kspace[-1:], truth[-1:]))
    return {"train": losses, "held_out": [before, after], "steps": model.log_step.exp().tolist()}


if __name__ == "__main__":
    result = train()
    for i, loss in enumerate(result["train"]):
        print(f"step {i + 1:2d}: training loss {loss:.4f}")
    print(f"held-out scan: {result['held_out'][0]:.4f} -> {result['held_out'][1]:.4f}")
    print("learned step sizes (times 1/L):", " ".join(f"{s:.2f}" for s in result["steps"]))
