"""The engine registry: every encoding engine, and the one place that chooses among them.

An engine is a subclass of :class:`~.encoding.Encoding` in a module of this folder that lists it in its
``ENGINES`` tuple; :data:`ENGINE_MODULES` names those modules (adding an engine is one module and one entry
here). Everything that depends on the engine reads it from the class: its name and device kind, its
capabilities, its time and memory models, its normal operator. Nothing outside this module compares engine
names.

:func:`choose_engine` turns the user's ``device`` and ``method`` into a device and an engine class: the
engine of that name on that device kind, or for ``method="auto"`` the fastest of the engines that allow
``auto`` there, by their time models (:meth:`~.encoding.Encoding.seconds`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from ...arrays.backend import Device, resolve_device_like
from ...errors import InvalidDataError, listed
from .encoding import Encoding

ENGINE_MODULES = ("cpu", "gpu", "cartesian")
"""The modules of this folder whose ``ENGINES`` tuples make the registry, in order of preference (on a tie of
predicted times the first wins)."""
ALIASES = {"gpu": "exact", "gpu-nufft": "nufft", "gpu-fft": "fft"}
"""Old engine names, accepted as input where engine names were accepted (the memory planner): the GPU's
exact sums were called ``"gpu"``, its NUFFT ``"gpu-nufft"`` and its FFT engine ``"gpu-fft"``."""


@functools.cache
def engines() -> tuple[type[Encoding], ...]:
    """Every registered engine class."""
    found: list[type[Encoding]] = []
    for name in ENGINE_MODULES:
        found += importlib.import_module(f"{__package__}.{name}").ENGINES
    return tuple(found)


def methods() -> tuple[str, ...]:
    """What a user asks for: ``"auto"`` or an engine's name (``"exact"``, ``"nufft"``, ``"fft"``), from the
    registry."""
    return ("auto", *dict.fromkeys(e.name for e in engines()))


def engine(method: str, device_kind: str) -> type[Encoding]:
    """The engine named ``method`` (an engine's name, an alias of :data:`ALIASES` or a ``key`` such as
    ``"exact-gpu"``) on ``device_kind`` (``"cpu"`` | ``"gpu"``); ``"auto"`` without a problem: the first
    engine there that ``auto`` may pick. ValueError for an unknown name."""
    method = ALIASES.get(method, method)
    for candidate in engines():
        if candidate.key == method:
            return candidate
    for candidate in engines():
        if candidate.device_kind == device_kind and (candidate.name == method or method == "auto" and candidate.auto
                                                     and "non-cartesian" in candidate.samplings):
            return candidate
    names = sorted({*methods(), *ALIASES, *(e.key for e in engines())})
    raise ValueError(f"unknown method {method!r}: expected one of {', '.join(names)}")


def sampling_of(scan: Any) -> str:
    """A scan's sampling, as engines' ``samplings`` name it: ``"cartesian"`` when its reader says so (samples
    on the image grid's integer frequencies: :mod:`mri_recon.io.cartesian`), else ``"non-cartesian"``."""
    value = scan.attrs.get("sampling")  # from a file: any type
    return "cartesian" if isinstance(value, str) and value == "cartesian" else "non-cartesian"


def fastest(device_kind: str, matrix: tuple[int, ...], samples: int, coils: int,
            psf: bool = True, sampling: str = "non-cartesian") -> type[Encoding]:
    """Of the engines ``auto`` may pick on ``device_kind`` for ``len(matrix)`` dimensions and this
    ``sampling``, the one predicted fastest for F^H d of ``coils`` coils of ``samples`` samples (and the PSF)."""
    matrix = tuple(int(v) for v in matrix)
    candidates = [e for e in engines() if e.device_kind == device_kind and e.auto and len(matrix) in e.dims
                  and sampling in e.samplings]
    if not candidates:
        raise InvalidDataError(f"no encoding engine serves {len(matrix)}-D images on the {device_kind}")
    return min(candidates, key=lambda e: e.seconds(matrix, samples, coils, psf))


def choose_engine(device: str | int | Device | None = "auto", method: str = "auto",
                  like: Any = None, problem: tuple[tuple[int, ...], int, int] | None = None,
                  sampling: str = "non-cartesian") -> tuple[Device, type[Encoding]]:
    """The device to compute on and the encoding engine for it.

    Parameters
    ----------
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N" | N | Device``. ``"auto"``: a CuPy input ``like`` keeps its own
        GPU; otherwise GPU 0 when CuPy and a GPU are present (for every method: ``"nufft"`` then means the
        GPU NUFFT, where it used to mean FINUFFT on the CPU), else the CPU.
    method
        ``"exact"``: exact sums (the GPU kernels on a GPU, the NumPy oracle on the CPU); ``"nufft"``: the
        GPU NUFFT on a GPU, FINUFFT on the CPU; ``"auto"``: FINUFFT on the CPU and, on a GPU, whichever of
        the exact kernels and the GPU NUFFT their time models predict faster for ``problem``
        (:func:`fastest`; the exact kernels when no problem is given).
    like
        An input array, consulted by ``device="auto"``.
    problem
        ``(matrix, samples, coils)`` of the work to do, for ``method="auto"``.
    sampling
        The scan's (:func:`sampling_of`): ``"auto"`` picks among the engines that serve it (a Cartesian scan:
        the FFT engines, by their time models).
    """
    if method not in methods():
        raise InvalidDataError(f"unknown method {method!r}: expected {listed(methods(), quote=True)}")
    dev = resolve_device_like(device, like)
    kind = "gpu" if dev.is_gpu else "cpu"
    if method != "auto" or problem is None:
        return dev, engine(method, kind)
    return dev, fastest(kind, *problem, sampling=sampling)
