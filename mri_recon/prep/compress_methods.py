"""The coil-compression methods (``coil_compress_method=``, ``--coil-compress-method``): a registry, and the one
entry point the preparations call (:func:`compression_for`).

- ``"svd"`` (the default): one matrix from the principal components of the k-space centre (:mod:`.compress`;
  BART's ``cc -S``), any sampling.
- ``"geometric"``: one matrix per readout position of a Cartesian scan (:mod:`.geometric`; GCC, BART's
  ``cc -G``), refused for any other sampling with the methods that serve it.

A method other than the default without ``coil_compress`` (none) is refused (:func:`check_method`): it would
compress nothing. ``coil_compress`` given a method's name (or BART's ``gcc``, ``scc``) is refused pointing at this
option (:func:`parse_choice`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..errors import InvalidDataError, listed
from ..operators.engines.registry import sampling_of
from ..scan import Scan
from .compress import AUTO_ENERGY, FORMS, CoilCompression, Compression, compression_of, parse_coil_compress, wanted


@dataclass(frozen=True)
class CompressionMethod:
    """One way of computing a coil compression (an entry of :data:`COMPRESSION_METHODS`)."""

    name: str
    what: str
    """What it is, in the words of help texts and errors."""
    samplings: tuple[str, ...]
    """The scans' samplings it serves (:func:`~mri_recon.operators.engines.registry.sampling_of`)."""
    compute: Callable[..., Compression]
    """``(scan, chosen, whitening)``: the compression of the host scan for a parsed choice other than ``"none"``;
    a method of :attr:`one_matrix` also takes ``uploaded=`` (the scan's k-space on a device) and ``index=`` (its
    centre's samples: :func:`~.compress.centre_samples`)."""
    bart: str = ""
    """BART's own name of the method (``cc -S`` is ``scc``), refused as a ``coil_compress`` value."""
    working: Callable[[int, int], int] = lambda coils, samples: 0
    """``(C, M)``: bytes its application holds beyond the compressed arrays, for the memory planner."""
    one_matrix: bool = False
    """Whether its compression is one matrix for every sample (:meth:`~.compress.Compression.product`)."""


def _svd(scan: Scan, chosen: str | int, whitening: Any, uploaded: Any = None, index: Any = None) -> CoilCompression:
    """The SVD compression of ``scan``; from ``uploaded``, its k-space already on a device (the centre's Gram
    matrix computed there), when given; ``index``: the centre's samples, when already known."""
    kspace = scan.kspace if uploaded is None else uploaded
    return compression_of(kspace, scan.trajectory, chosen, whitening, scan.source, index)


def _geometric(scan: Scan, chosen: str | int, whitening: Any = None) -> Compression:
    """:func:`.geometric.geometric_compression` (its module loads when a scan is compressed so)."""
    from .geometric import geometric_compression  # noqa: PLC0415 - Cartesian GCC's module, loaded when it runs

    return geometric_compression(scan, chosen, whitening)


def _geometric_working(coils: int, samples: int) -> int:
    """:func:`.geometric.geometric_working`."""
    from .geometric import geometric_working  # noqa: PLC0415 - Cartesian GCC's module, loaded when it runs

    return geometric_working(coils, samples)


COMPRESSION_METHODS = {method.name: method for method in (
    CompressionMethod("svd", "one matrix from the k-space centre, as bart cc -S", ("non-cartesian", "cartesian"),
                      _svd, "scc", one_matrix=True),
    CompressionMethod("geometric", "Cartesian scans: one matrix per readout position along the first image axis, "
                      "aligned along it, as bart cc -G", ("cartesian",), _geometric, "gcc",
                      _geometric_working))}
"""The coil-compression methods by name, the default first."""
DEFAULT_METHOD = next(iter(COMPRESSION_METHODS))


def method_names() -> tuple[str, ...]:
    """The names ``coil_compress_method`` takes."""
    return tuple(COMPRESSION_METHODS)


def choice_help() -> str:
    """The help text of ``--coil-compress``."""
    return (f"Compress the receivers to N virtual coils after prewhitening, by --coil-compress-method (default "
            f"{DEFAULT_METHOD}: the principal components of the k-space centre, as bart cc -p N); auto: the fewest "
            f"that keep {AUTO_ENERGY:.0%} of the calibration energy; none keeps every coil. Coil maps and the solve "
            f"then run on the virtual coils.")


def method_help() -> str:
    """The help text of ``--coil-compress-method``, from the registry."""
    return "How --coil-compress computes the virtual coils: " + "; ".join(
        f"{m.name} ({m.what})" for m in COMPRESSION_METHODS.values()) + "."


def compression_method(name: Any) -> CompressionMethod:
    """The :class:`CompressionMethod` called ``name``; anything else raises
    :class:`~mri_recon.errors.InvalidDataError` naming the option."""
    if isinstance(name, str) and name in COMPRESSION_METHODS:
        return COMPRESSION_METHODS[name]
    raise InvalidDataError(f"coil_compress_method must be {listed(method_names(), 'or')}, found {name!r}")


def parse_choice(value: Any) -> str | int:
    """:func:`~.compress.parse_coil_compress`, with a method's name (or BART's, e.g. ``"gcc:8"``) refused as
    belonging to ``coil_compress_method``."""
    if isinstance(value, str):
        word = value.strip().lower().split(":")[0]
        named = next((m.name for m in COMPRESSION_METHODS.values() if word in (m.name, m.bart)), None)
        if named is not None:
            raise InvalidDataError(f"coil_compress {value!r}: the method is coil_compress_method={named!r} "
                                   f"(--coil-compress-method {named}); coil_compress is {FORMS}")
    return parse_coil_compress(value)


def check_method(choice: Any, method: Any) -> None:
    """Refuse an unknown method, and a method other than the default without compression (``coil_compress``
    none: nothing would be compressed by it)."""
    chosen = compression_method(method)
    if chosen.name != DEFAULT_METHOD and not wanted(choice):
        raise InvalidDataError(f"coil_compress_method {chosen.name!r} chooses how coils are compressed, and "
                               f"coil_compress is none: give the virtual coils (--coil-compress N or auto)")


def compression_for(scan: Scan, choice: Any, method: Any = DEFAULT_METHOD, whitening: np.ndarray | None = None
                    ) -> Compression | None:
    """The compression of the host ``scan`` for ``choice`` (:func:`parse_choice`, or a compression computed
    before: checked against the scan's coils) by ``method``, its data whitened by ``whitening`` ``(C, C)``
    first; None for ``"none"``.

    Raises
    ------
    InvalidDataError
        An unknown choice or method, a method that does not serve the scan's sampling, or the method's own
        refusals.
    """
    return compression_task(scan, choice, method, whitening)()


def one_matrix(choice: Any, method: Any = DEFAULT_METHOD) -> bool:
    """Whether ``choice`` compressed by ``method`` is one matrix for every sample (a given compression: whether
    it has one, :meth:`~.compress.Compression.product`), known before it is computed: the device preparation
    then compresses the data on the device after their upload where the memory plan holds the receivers, else
    computes it first and compresses the data on their way up."""
    if isinstance(choice, Compression):
        return choice.product() is not None
    return compression_method(method).one_matrix


def compression_task(scan: Scan, choice: Any, method: Any = DEFAULT_METHOD, whitening: np.ndarray | None = None
                     ) -> Callable[..., Compression | None]:
    """:func:`compression_for` in two parts: the choices checked now (its errors but the method's own), and
    the computation returned, to run when (and on whichever thread) the caller likes. Where the compression is
    one matrix (:func:`one_matrix`) the computation also takes ``uploaded=`` and ``index=``
    (:attr:`CompressionMethod.compute`)."""
    if isinstance(choice, Compression):
        if choice.coils != scan.n_coils:
            raise InvalidDataError(f"{scan.source}: a coil compression of {choice.coils} coils cannot compress "
                                   f"{scan.n_coils} coils")
        return lambda **uploaded: choice
    check_method(choice, method)
    entry, chosen = compression_method(method), parse_choice(choice)
    if chosen == "none":
        return lambda **uploaded: None
    sampling = sampling_of(scan)
    if sampling not in entry.samplings:
        serving = [m.name for m in COMPRESSION_METHODS.values() if sampling in m.samplings]
        raise InvalidDataError(f"{scan.source}: coil_compress_method {entry.name} ({entry.what}) takes "
                               f"{listed(entry.samplings, 'or')} scans, and this one is {sampling}; use "
                               f"coil_compress_method {listed(serving, 'or')}")
    return partial(entry.compute, scan, chosen, whitening)
