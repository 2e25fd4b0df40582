"""Tensors as the package's arrays and back, without copies where the memory allows it.

A CPU tensor is seen as a NumPy array through ``Tensor.numpy()`` and a NumPy result becomes a tensor through
``torch.from_numpy``: both share the memory. A CUDA tensor is seen as a CuPy array through DLPack
(``cupy.from_dlpack``) and a CuPy result comes back through ``torch.from_dlpack``, also sharing the memory.
The CUDA work runs on the tensor's device and on PyTorch's current stream of that device (:func:`on_stream`
makes it CuPy's current stream), so it is ordered with the caller's own kernels and no side waits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..arrays.backend import Device, cupy_module
from ..errors import DeviceError, SchemaError

COMPLEX = {torch.complex64: np.complex64, torch.complex128: np.complex128}
"""The complex dtypes the operators take, with their NumPy twins."""
REAL_TO_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
"""A real input is taken as complex of the same precision (its gradient is then real again)."""


def as_array(tensor: torch.Tensor) -> Any:
    """The tensor's values as a NumPy array (CPU tensor) or a CuPy array (CUDA tensor), sharing its memory when
    it is contiguous and has no lazy conjugation or negation (else a contiguous copy is viewed). Detached: the
    array is outside autograd. A CUDA tensor's array is made on the current CuPy stream (see
    :func:`on_stream`)."""
    values = tensor.detach().resolve_conj().resolve_neg().contiguous()
    if values.is_cuda:
        return _cupy().from_dlpack(values)
    return values.numpy()


def as_tensor(array: Any) -> torch.Tensor:
    """A NumPy array (as a CPU tensor) or a CuPy array (as a CUDA tensor on its GPU) as a tensor sharing its
    memory."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    return torch.from_dlpack(array)


@contextlib.contextmanager
def on_stream(device: torch.device) -> Iterator[None]:
    """For a CUDA device: that GPU as CuPy's current device and PyTorch's current stream of that GPU as CuPy's
    current stream, so that the package's kernels queue behind the caller's and the results' readers need
    no synchronization. Nothing for the CPU."""
    if device.type != "cuda":
        yield
        return
    cupy = _cupy()
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index)
    with cupy.cuda.Device(index), _external(cupy, stream, index):
        yield


def _external(cupy: Any, stream: torch.cuda.Stream, index: int) -> Any:
    """PyTorch's ``stream`` as a CuPy stream (through the CUDA stream protocol where CuPy has it)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(stream, "__cuda_stream__"):
        return from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream, index)


def _cupy() -> Any:
    cupy = cupy_module()
    if cupy is None:
        raise DeviceError("a CUDA tensor needs CuPy for the GPU operators: pip install 'mri-recon[gpu]'")
    return cupy


def device_of(device: Any, *tensors: Any) -> tuple[str, torch.device]:
    """The package's device name (``"cpu"``, ``"gpu:N"``; ``"gpu"`` or ``"auto"`` as given) and the torch
    device of the operator: ``device`` as a torch device or ``"cuda[:N]"``, as a package name, or None for
    the device of the first tensor among ``tensors`` (the CPU when none is a tensor)."""
    if device is None:
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))
    if isinstance(device, str) and device.startswith("cuda"):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type == "cpu":
            return "cpu", device
        if device.type != "cuda":
            raise DeviceError(f"the operators run on the CPU or a CUDA GPU, found torch device {device}")
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"gpu:{index}", torch.device("cuda", index)
    return device, torch.device("cpu")  # a package name: the caller reads the chosen device back


def torch_device(device: Device) -> torch.device:
    """The torch device of a package :class:`~mri_recon.arrays.backend.Device`."""
    return torch.device("cuda", device.index) if device.is_gpu else torch.device("cpu")


def complex_input(source: str, name: str, tensor: Any, device: torch.device) -> torch.Tensor:
    """``tensor`` checked (a tensor on ``device``, complex64 or complex128, or real float32 or float64 taken
    as complex of the same precision, through autograd)."""
    if not isinstance(tensor, torch.Tensor):
        raise SchemaError(f"{source}: {name} must be a torch.Tensor, found {type(tensor).__name__}")
    if tensor.device != device:
        raise DeviceError(
            f"{source}: {name} is on {tensor.device} but the operator is on {device}; move it with .to('{device}')"
        )
    if tensor.dtype in REAL_TO_COMPLEX:
        return tensor.to(REAL_TO_COMPLEX[tensor.dtype])
    if tensor.dtype not in COMPLEX:
        raise SchemaError(
            f"{source}: {name} must be complex64 or complex128 (or float32, float64), found {tensor.dtype}"
        )
    return tensor
