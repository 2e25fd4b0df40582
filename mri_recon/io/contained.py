"""A scan file is read only within itself: links and datasets that reach other files, checked before any read.

HDF5 lets an object of one file read another: an external link (``h5py.ExternalLink``), a dataset whose raw
data lie in external files (``create_dataset(..., external=[(path, offset, size)])``) and a virtual dataset
(VDS) whose sources are in other files. A crafted scan can so copy any file the user can read into the
reconstructed image. :func:`check_contained` walks every link of the file (without following any) and every
dataset's creation property list, and refuses what resolves outside the file unless ``allow_external``.

With ``allow_external`` the targets are checked instead: a missing or unreadable VDS source, a source
selection beyond the source's extent and an external raw file shorter than its declared size are refused,
since HDF5 reads their fill value (zeros) for them without an error. A VDS whose source file is ``"."``
reads its own file: allowed, and its sources are checked the same way. Soft links point inside the file
(one whose path runs through an external link is caught at that link). A user block (bytes before the
HDF5 superblock, as MATLAB v7.3 files have) is part of the file and is not read: nothing to refuse.

Paths are resolved as HDF5 resolves them (``H5F_prefix_open_file`` for VDS sources and external links: the
name itself when absolute, then ``HDF5_VDS_PREFIX`` / ``HDF5_EXT_PREFIX`` entries with ``${ORIGIN}``, the
file's folder, the name relative to the working directory; external raw files: ``HDF5_EXTFILE_PREFIX``, else
relative to the working directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py

from ..errors import ExternalDataError, printable

OPT_IN = "--allow-external-data / allow_external=True"
"""How a user asks to read what a file reaches outside itself."""
_REFUSED = f"refused: a scan file is read only within itself ({OPT_IN} reads it)"
_DEPTH = 8
"""Most files a chain of virtual sources may run through (a cycle of files ends here)."""


def check_contained(f: h5py.File, src: str, allow_external: bool = False) -> None:
    """Refuse every link and dataset of ``f`` that reads another file, or with ``allow_external`` every
    target that is missing or short (:class:`~mri_recon.errors.ExternalDataError` naming both)."""
    _Walk(src, allow_external, f.filename).file(f, 0)


class _Walk:
    def __init__(self, src: str, allow: bool, file_name: str) -> None:
        self.src, self.allow, self.file_name = src, allow, file_name

    def refuse(self, what: str) -> None:
        raise ExternalDataError(printable(f"{self.src}: {what}"))

    def file(self, f: h5py.File, depth: int) -> None:
        # Links first: a virtual source looked up below may name a path through an external link.
        for name, kind, value, stored in sorted(_links(f), key=lambda link: link[1] == h5py.h5l.TYPE_HARD):
            self.link(f, name, kind, value, stored, depth)

    def link(self, f: h5py.File, name: str, kind: int, value: object, stored: bytes, depth: int) -> None:
        where = f"'/{name}'"
        if kind == h5py.h5l.TYPE_EXTERNAL:
            target = f"'{_text(value[0])}:{_text(value[1])}'"
            if not self.allow:
                self.refuse(f"{where} is an external link to {target}; {_REFUSED}")
            self.target(f, stored, f"{where} cannot be opened: external link to {target}", depth)
        elif kind == h5py.h5l.TYPE_HARD:
            oid = h5py.h5o.open(f.id, stored)
            if isinstance(oid, h5py.h5d.DatasetID):  # not a group or a committed datatype
                self.dataset(f, oid, name, depth)
        elif kind != h5py.h5l.TYPE_SOFT:
            self.refuse(f"{where} is a user-defined link (type {kind}), which may read another file; expected "
                        f"hard or soft links")

    def target(self, f: h5py.File, stored: bytes, what: str, depth: int) -> None:
        """An allowed external link: its target must open; the datasets there are checked like those here."""
        try:
            obj = f.get(stored)
        except (OSError, KeyError, ValueError) as exc:
            obj, why = None, str(exc)
        else:
            why = "not found"
        if obj is None:
            self.refuse(f"{what} ({why})")
        if depth >= _DEPTH:
            return
        found = [obj] if isinstance(obj, h5py.Dataset) else []
        if isinstance(obj, h5py.Group):  # hard links only, as in this file
            obj.visititems(lambda _, item: found.append(item) if isinstance(item, h5py.Dataset) else None)
        for d in found:
            self.dataset(d.file, d.id, d.name.lstrip("/"), depth + 1)

    def dataset(self, f: h5py.File, dsid: h5py.h5d.DatasetID, name: str, depth: int) -> None:
        plist = dsid.get_create_plist()
        if plist.get_external_count():
            self.external_raw(f, plist, name)
        if plist.get_layout() == h5py.h5d.VIRTUAL:
            for i in range(plist.get_virtual_count()):
                self.virtual(f, plist, i, name, depth)

    def external_raw(self, f: h5py.File, plist: h5py.h5p.PropDCID, name: str) -> None:
        entries = [plist.get_external(i) for i in range(plist.get_external_count())]
        if not self.allow:
            first = os.fsdecode(entries[0][0])
            more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
            self.refuse(f"dataset '/{name}' stores its data in the external file '{first}'{more}; {_REFUSED}")
        for raw, offset, size in entries:
            path = _extfile(os.fsdecode(raw), f.filename)
            try:
                have = path.stat().st_size
            except OSError as exc:
                self.refuse(f"dataset '/{name}' reads the external file '{path}', which cannot be opened "
                            f"({exc.strerror}); HDF5 would fail or read zeros")
            if size != h5py.h5f.UNLIMITED and have < offset + size:
                self.refuse(f"dataset '/{name}' reads {size} bytes at offset {offset} of the external file "
                            f"'{path}', which holds {have}; HDF5 would read zeros for the rest")

    def virtual(self, f: h5py.File, plist: h5py.h5p.PropDCID, i: int, name: str, depth: int) -> None:
        filename, dsetname = plist.get_virtual_filename(i), plist.get_virtual_dsetname(i)
        source = f"'{filename}:{dsetname}'"
        if filename != "." and not self.allow:
            self.refuse(f"dataset '/{name}' is a virtual dataset reading {source}; {_REFUSED}")
        missing = (f"virtual dataset '/{name}' maps the source {source}, which {{}}; HDF5 would read its fill "
                   f"value (zeros) instead")
        other = None
        if filename != ".":
            path = _resolve(filename, f.filename, "HDF5_VDS_PREFIX")
            if path is None:
                self.refuse(missing.format("cannot be found"))
            try:
                other = h5py.File(path, "r")
            except OSError as exc:
                self.refuse(missing.format(f"cannot be opened as HDF5 ({exc})"))
        try:
            self.source(other or f, plist, i, dsetname, missing, depth)
        finally:
            if other is not None:
                other.close()

    def source(self, f: h5py.File, plist: h5py.h5p.PropDCID, i: int, dsetname: str, missing: str,
               depth: int) -> None:
        """The source dataset exists, covers the selection mapped from it, and is itself contained."""
        if depth >= _DEPTH:
            self.refuse(missing.format(f"runs through more than {_DEPTH} files of virtual sources"))
        try:
            d = f.get(dsetname)
        except (OSError, KeyError, ValueError):
            d = None
        if not isinstance(d, h5py.Dataset):
            self.refuse(missing.format(f"is not a dataset of {f.filename}"))
        space = plist.get_virtual_srcspace(i)
        if space.get_select_type() == h5py.h5s.SEL_ALL:
            short = d.size < plist.get_virtual_vspace(i).get_select_npoints()
        else:
            end = space.get_select_bounds()[1]
            short = len(end) != d.ndim or any(e >= n for e, n in zip(end, d.shape))
        if short:
            self.refuse(missing.format(f"has shape {d.shape}, smaller than the selection mapped from it"))
        if f.filename != self.file_name:  # a dataset of this file is checked where the walk reaches it
            self.dataset(d.file, d.id, d.name.lstrip("/"), depth + 1)


def _links(f: h5py.File) -> list[tuple[str, int, object, bytes]]:
    """Every link of ``f``: its name shown, its type (``h5py.h5l.TYPE_*``), its value (an external link's
    ``(file, path)``, a soft link's path; None for a hard link) and its name as stored; none followed, groups
    reached by hard links only (``H5Lvisit``). Low-level calls: a name need not be UTF-8."""
    names: list[bytes] = []
    f.id.links.visit(names.append)
    out = []
    for name in names:
        kind = f.id.links.get_info(name).type
        value = f.id.links.get_val(name) if kind != h5py.h5l.TYPE_HARD else None
        out.append((_text(name), kind, value, name))
    return out


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _prefixes(variable: str, origin: str) -> list[str]:
    value = os.environ.get(variable)
    return [p.replace("${ORIGIN}", origin) for p in value.split(os.pathsep) if p] if value else []


def _resolve(name: str, parent: str, variable: str) -> Path | None:
    """Where HDF5 finds the file ``name`` that the file ``parent`` refers to (None: nowhere)."""
    origin = os.path.dirname(os.path.abspath(parent))
    if os.path.isabs(name):
        if os.path.isfile(name):
            return Path(name)
        name = os.path.basename(name)
    for folder in [*_prefixes(variable, origin), origin]:
        if os.path.isfile(os.path.join(folder, name)):
            return Path(folder, name)
    return Path(name) if os.path.isfile(name) else None


def _extfile(name: str, parent: str) -> Path:
    """Where HDF5 reads an external raw file: ``HDF5_EXTFILE_PREFIX``, else relative to the working folder."""
    if not os.path.isabs(name):
        for folder in _prefixes("HDF5_EXTFILE_PREFIX", os.path.dirname(os.path.abspath(parent)))[:1]:
            return Path(folder, name)
    return Path(name)
