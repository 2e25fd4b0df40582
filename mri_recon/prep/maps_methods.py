"""The coil-map methods, one registry: :data:`COIL_MAPS`, what ``coil_maps=`` may name and what each needs.

A method takes the scan's own maps (``file``), estimates maps from the data in the pipeline's coil-map stage
(``estimated``: Walsh, ESPIRiT, NLINV), or reconstructs without maps (``sense`` False: each coil alone, combined by
root-sum-of-squares). ``auto`` stands for one of the others, chosen per scan (:func:`chosen_method`);
``none`` is what ``auto`` records for a single coil without maps, never a choice.

Everything else asks this module: the settings' choices and help (and so the command line's), the
preparation on the host and on the device, the coil-map stage's check, the planner's preparation and the
messages. An estimated method is implemented under its name by :mod:`.coilmaps` (from the k-space centre),
:mod:`.cartesian_maps` (a Cartesian scan's autocalibration region) and :mod:`mri_recon.planning.preparation` (its
memory model); ``tests/test_coilmaps.py`` checks that each of them serves every estimated method here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidDataError, listed


@dataclass(frozen=True)
class CoilMapMethod:
    """One value of ``coil_maps=`` (``--coil-maps``) and what it needs (``auto``'s flags are those of the
    method it stands for, :func:`chosen_method`)."""

    name: str
    help: str
    """What it does, in the command line's help."""
    file: bool = False
    """Takes the scan's own maps (whitened with the data); the scan must have them."""
    estimated: bool = False
    """Estimates maps from the data, in the pipeline's coil-map stage
    (:class:`~mri_recon.prep.maps_stage.CoilMapEstimate`)."""
    sense: bool = True
    """The reconstruction has maps (one image); False: one image per coil, combined by root-sum-of-squares."""
    offered: bool = True
    """A user may choose it (False: only recorded, ``none``)."""
    auto_for: tuple[str, ...] = ()
    """The samplings (:func:`~mri_recon.operators.engines.registry.sampling_of`) of scans with several coils
    and no maps for which ``auto`` estimates with this method."""
    maps_kernels: bool = False
    """Estimated on a GPU by the kernels of ``kernels/maps.cu`` (:mod:`.walsh_gpu`), whose module the pipeline
    builds ahead."""


COIL_MAPS: dict[str, CoilMapMethod] = {m.name: m for m in (
    CoilMapMethod("auto", "the file's maps, else Walsh (ESPIRiT for Cartesian scans)"),
    CoilMapMethod("file", "the file's maps", file=True),
    CoilMapMethod("walsh", "estimated from the k-space centre (Walsh)", estimated=True, auto_for=("non-cartesian",),
                  maps_kernels=True),
    CoilMapMethod("espirit", "estimated from the k-space centre (ESPIRiT)", estimated=True, auto_for=("cartesian",)),
    CoilMapMethod("nlinv", "estimated with the image by nonlinear inversion (NLINV; all samples, or a Cartesian "
                  "scan's calibration region)",
                  estimated=True),
    CoilMapMethod("rss", "no maps, root-sum-of-squares", sense=False),
    CoilMapMethod("none", "one coil without maps", sense=False, offered=False),
)}
"""Every coil-map method by name, in the order they are listed to users."""
AUTO = "auto"
"""The choice made per scan (:func:`chosen_method`)."""
ONE_COIL = "none"
"""What ``auto`` stands for with one coil and no maps."""


def choices() -> tuple[str, ...]:
    """The names a user may give (``coil_maps=``, ``--coil-maps``), in order."""
    return tuple(name for name, method in COIL_MAPS.items() if method.offered)


def estimated() -> tuple[str, ...]:
    """The names of the methods that estimate maps from the data."""
    return tuple(name for name, method in COIL_MAPS.items() if method.estimated)


def coil_map_help() -> str:
    """The help of ``--coil-maps``: each choice and what it does."""
    return "; ".join(f"{name}: {COIL_MAPS[name].help}" for name in choices()) + "."


def method_of(name: str) -> CoilMapMethod:
    """The method a user chose by ``name``; :class:`~mri_recon.errors.InvalidDataError` listing the choices
    for any other value."""
    found = COIL_MAPS.get(name) if isinstance(name, str) else None
    if found is None or not found.offered:
        raise InvalidDataError(f"unknown coil-map choice {name!r}: expected one of {', '.join(choices())}")
    return found


def is_estimated(name: object) -> bool:
    """Whether ``name`` (of any type) names a method that estimates maps from the data."""
    return isinstance(name, str) and name in estimated()


def without_file_maps() -> str:
    """The choices for a scan without maps, in words (``"walsh, espirit or rss"``)."""
    return listed(tuple(n for n in choices() if n != AUTO and not COIL_MAPS[n].file))


def chosen_method(requested: str, has_maps: bool, n_coils: int, sampling: str) -> str:
    """The method ``requested`` stands for with a scan that has maps (``has_maps``) or not, ``n_coils`` coils
    and ``sampling``: ``requested`` itself (refused unless a choice: :func:`method_of`), or for ``auto`` the
    file's maps, else an estimate (the method whose :attr:`~CoilMapMethod.auto_for` holds the sampling) for
    several coils, else ``none``."""
    if method_of(requested).name != AUTO:
        return requested
    if has_maps:
        return next(name for name, method in COIL_MAPS.items() if method.file)
    if n_coils > 1:
        return next(name for name, method in COIL_MAPS.items() if sampling in method.auto_for)
    return ONE_COIL
