"""Build (or check) the precompiled kernel bundle: every registry configuration for every target, with NVRTC.

For each ``(file, defines)`` of ``mri_recon/kernels/registry.json`` and each target of
``mri_recon.kernels.bundle.TARGETS`` (CUBIN for sm_80, sm_90, sm_100, sm_120; PTX for compute_120) NVRTC
compiles the kernel with the options the loader records (``bundle.compile_options``); each binary is stored
xz-compressed as ``<key>.cubin.xz`` / ``<key>.ptx.xz`` and listed in ``manifest.json`` with its key, source
hash, options, target and SHA-256. No GPU is needed. The output depends only on the sources, the registry and
the NVRTC version (no dates, no paths): two builds with one NVRTC write the same bytes. Entries of an existing
bundle whose key and SHA-256 still match are kept without recompiling.

Usage: python scripts/build_kernels.py [--defaults] [--out DIR] [--jobs N] [--files fhd.cu,cg.cu]
       python scripts/build_kernels.py --check [--defaults] [--out DIR]   (exit 1: an entry missing, stale, altered)

``--defaults`` builds only the modules of a default reconstruction (``stages.state.default_kernels``): the
bundle committed with the sources, so that an installation from a checkout loads them without compiling.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mri_recon.kernels import KERNEL_DIR, registry, source
from mri_recon.kernels import bundle as kb


def nvrtc_module():
    """CuPy's NVRTC binding (the 'test' extra carries it: cupy-cuda13x and nvidia-cuda-nvrtc)."""
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


def nvrtc_version() -> str:
    major, minor = nvrtc_module().getVersion()
    return f"{major}.{minor}"


def plan(files: set[str] | None = None, targets: tuple[str, ...] = kb.TARGETS,
         defaults: bool = False) -> list[tuple[str, dict[str, int], str]]:
    """Every ``(file, defines, target)`` to build: the registry (or, ``defaults``, the modules of a default
    reconstruction: ``mri_recon.stages.state.default_kernels``, the bundle a checkout ships), restricted to
    ``files``, times ``targets``."""
    configs = registry.configurations()
    if defaults:
        from mri_recon.stages.state import default_kernels

        configs = default_kernels()
    return [(f, d, t) for f, d in configs if files is None or f in files for t in targets]


def compile_one(filename: str, defines: dict[str, int], target: str) -> bytes:
    """NVRTC's CUBIN (``sm_*``) or PTX (``compute_*``) of one configuration, with the recorded options."""
    nvrtc = nvrtc_module()
    program = nvrtc.createProgram(source(filename), filename, [], [])
    try:
        try:
            nvrtc.compileProgram(program, [*kb.compile_options(defines, target), f"-I{KERNEL_DIR}"])
        except nvrtc.NVRTCError as exc:
            raise SystemExit(f"{filename} {defines} {target} failed:\n{nvrtc.getProgramLog(program)}") from exc
        data = nvrtc.getCUBIN(program) if target.startswith("sm_") else nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    return data.encode() if isinstance(data, str) else bytes(data)


def entry_for(filename: str, defines: dict[str, int], target: str, nvrtc: str) -> dict:
    """The manifest entry of one binary, without its SHA-256 and size."""
    entry = kb.expected(filename, defines, target, nvrtc)
    suffix = "cubin" if target.startswith("sm_") else "ptx"
    return {**entry, "defines": dict(sorted(defines.items())), "binary": f"{entry['key']}.{suffix}.xz"}


def _reusable(old: kb.Bundle, entry: dict) -> bytes | None:
    """The compressed file of ``entry`` in the old bundle when it is there under the same key (the same source,
    options, target and NVRTC) and verifies."""
    previous = old.entries.get(entry["key"])
    if previous is None or old.read(previous) is None:
        return None
    return (old.directory / previous["binary"]).read_bytes()


def build(out: Path, files: set[str] | None = None, jobs: int | None = None,
          targets: tuple[str, ...] = kb.TARGETS, defaults: bool = False) -> dict:
    """Write the bundle of ``plan(files, targets, defaults)`` to ``out`` (atomically: a sibling folder, then
    renamed); return the manifest."""
    nvrtc = nvrtc_version()
    old = kb.Bundle(out)
    entries = [entry_for(f, d, t, nvrtc) for f, d, t in plan(files, targets, defaults)]

    def make(entry: dict) -> tuple[dict, bytes]:
        kept = _reusable(old, entry)
        if kept is not None:
            raw = lzma.decompress(kept)
            return {**entry, "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}, kept
        raw = compile_one(entry["file"], entry["defines"], entry["target"])
        packed = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
        return {**entry, "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}, packed

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:  # NVRTC releases the GIL
        built = list(pool.map(make, entries))
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for entry, packed in built:
        (staging / entry["binary"]).write_bytes(packed)
    manifest = {"format": kb.FORMAT, "nvrtc": nvrtc, "targets": list(targets),
                "entries": sorted((entry for entry, _ in built), key=lambda e: e["key"])}
    (staging / kb.MANIFEST).write_text(json.dumps(manifest, indent=0, sort_keys=True) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    return manifest


def check(out: Path, files: set[str] | None = None, defaults: bool = False) -> list[str]:
    """Problems of the bundle at ``out`` against the current sources and registry: missing or stale entries,
    binaries whose SHA-256 differs (empty when it is complete and intact)."""
    bundle = kb.Bundle(out)
    if not bundle.entries:
        return [f"no readable bundle at {out}"]
    problems = []
    for filename, defines, target in plan(files, defaults=defaults):
        want = entry_for(filename, defines, target, bundle.nvrtc)
        entry = bundle.entries.get(want["key"])
        if entry is None:
            problems.append(f"missing or stale: {filename} {defines} {target}")
        elif bundle.read(entry) is None:
            problems.append(f"altered or unreadable: {entry['binary']} ({filename} {target})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=kb.BUNDLE_DIR)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--files", default=None, help="comma-separated kernel files (default: all)")
    parser.add_argument("--check", action="store_true", help="verify an existing bundle instead of building")
    parser.add_argument("--defaults", action="store_true",
                        help="only the modules of a default reconstruction (the bundle a checkout ships)")
    args = parser.parse_args()
    files = set(args.files.split(",")) if args.files else None
    if args.check:
        problems = check(args.out, files, args.defaults)
        for line in problems[:50]:
            print(line)
        print(f"{args.out}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        return 1 if problems else 0
    start = time.perf_counter()
    manifest = build(args.out, files, args.jobs, defaults=args.defaults)
    packed = sum((args.out / e["binary"]).stat().st_size for e in manifest["entries"])
    raw = sum(e["bytes"] for e in manifest["entries"])
    print(f"{len(manifest['entries'])} binaries (NVRTC {manifest['nvrtc']}) in {args.out}: "
          f"{packed / 1e6:.1f} MB compressed, {raw / 1e6:.1f} MB raw, {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
