"""The precompiled kernel bundle: what the manifest records, and every reason a binary is refused (no GPU)."""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
from pathlib import Path

import pytest
from helpers import load_script

import mri_recon.kernels as kernels
from mri_recon.kernels import bundle as kb
from mri_recon.kernels import registry

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="NVRTC comes with the 'test' extra")

ROOT = Path(__file__).resolve().parents[1]
FILES = {"prox.cu", "cg.cu"}  # small kernels: the whole bundle logic, a few seconds of NVRTC
DRIVER = 13020  # a CUDA 13.2 driver


def _script():
    return load_script("build_kernels")


build_kernels = _script()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "bundle"
    manifest = build_kernels.build(out, FILES, jobs=2)
    return out, manifest


@pytest.fixture
def copy(built, tmp_path):
    """A private copy of the built bundle that a test may damage."""
    target = tmp_path / "bundle"
    shutil.copytree(built[0], target)
    return target


def _entry(directory: Path, filename: str, target: str) -> dict:
    manifest = json.loads((directory / kb.MANIFEST).read_text())
    return next(e for e in manifest["entries"] if e["file"] == filename and e["target"] == target)


def _rewrite(directory: Path, change) -> None:
    manifest = json.loads((directory / kb.MANIFEST).read_text())
    change(manifest)
    (directory / kb.MANIFEST).write_text(json.dumps(manifest))


def test_a_matching_binary_is_what_nvrtc_builds(built):
    out, manifest = built
    found = kb.Bundle(out).binary("cg.cu", {}, 90, DRIVER)
    assert found is not None and found[0] == "sm_90"
    assert found[1] == build_kernels.compile_one("cg.cu", {}, "sm_90")
    entry = _entry(out, "cg.cu", "sm_90")
    assert entry["sha256"] == hashlib.sha256(found[1]).hexdigest()
    assert entry["source_sha256"] == hashlib.sha256(kb.expanded_source("cg.cu").encode()).hexdigest()
    assert entry["options"][-1] == "-arch=sm_90" and "-ftz=true" in entry["options"]
    assert not any(opt.startswith("-I") for opt in entry["options"])  # no install path in the key
    assert manifest["nvrtc"] == build_kernels.nvrtc_version()


@pytest.mark.parametrize(("capability", "target"), [(80, "sm_80"), (86, "sm_80"), (89, "sm_80"), (90, "sm_90"),
                                                    (100, "sm_100"), (103, "sm_100"), (120, "sm_120"),
                                                    (121, "sm_120"), (130, "compute_120"), (150, "compute_120")])
def test_each_device_gets_a_binary_it_runs(built, capability, target):
    found = kb.Bundle(built[0]).binary("prox.cu", {}, capability, 13990)  # a driver newer than the PTX
    assert found is not None and found[0] == target


@pytest.mark.parametrize("capability", [75, 110, 119])
def test_no_binary_for_an_architecture_nothing_in_the_bundle_runs_on(built, capability):
    """7.5 is older than every target; 11.x has no CUBIN of its major and is older than the PTX (12.0)."""
    assert kb.targets_for(capability) == []
    assert kb.Bundle(built[0]).binary("prox.cu", {}, capability, DRIVER) is None


def test_a_foreign_architecture_is_never_chosen():
    assert kb.targets_for(90) == ["sm_90"]  # not sm_80 (another major), not PTX 12.0 (newer than the device)
    assert kb.targets_for(86) == ["sm_80"]
    assert kb.targets_for(130) == ["compute_120"]
    assert kb.targets_for(100, ("sm_90", "sm_103", "compute_90")) == ["compute_90"]  # 10.3 code on 10.0: never


def test_a_tampered_binary_is_refused(copy):
    entry = _entry(copy, "cg.cu", "sm_90")
    raw = bytearray(lzma.decompress((copy / entry["binary"]).read_bytes()))
    raw[len(raw) // 2] ^= 0x01
    (copy / entry["binary"]).write_bytes(lzma.compress(bytes(raw)))
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None
    (copy / entry["binary"]).write_bytes(b"not xz")
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None
    (copy / entry["binary"]).unlink()
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None
    assert kb.Bundle(copy).binary("cg.cu", {}, 80, DRIVER) is not None  # the other entries still serve


def test_a_changed_source_or_options_find_nothing(built, monkeypatch):
    bundle = kb.Bundle(built[0])
    assert bundle.binary("cg.cu", {"EXTRA": 1}, 90, DRIVER) is None  # options not built
    monkeypatch.setattr(kb, "source_sha256", lambda filename: hashlib.sha256(b"edited").hexdigest())
    assert bundle.binary("cg.cu", {}, 90, DRIVER) is None


def test_a_wrong_recorded_source_hash_is_refused(copy):
    def edit(field, value):
        def change(manifest):
            for e in manifest["entries"]:
                if e["file"] == "cg.cu" and e["target"] == "sm_90":
                    e[field] = value
        return change

    _rewrite(copy, edit("source_sha256", "0" * 64))
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None
    assert kb.Bundle(copy).binary("cg.cu", {}, 100, DRIVER) is not None


def test_an_entry_relabelled_for_another_architecture_is_refused(copy):
    """An sm_80 binary listed as sm_90 under the sm_90 key: the recorded options (-arch=sm_80) do not match."""
    def relabel(manifest):
        entries = {(e["file"], e["target"]): e for e in manifest["entries"]}
        sm80, sm90 = entries[("cg.cu", "sm_80")], entries[("cg.cu", "sm_90")]
        manifest["entries"].remove(sm90)
        sm80["key"], sm80["target"] = sm90["key"], "sm_90"

    _rewrite(copy, relabel)
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None


def test_a_binary_path_outside_the_bundle_is_refused(copy):
    def escape(manifest):
        for e in manifest["entries"]:
            e["binary"] = "../" + e["binary"]

    _rewrite(copy, escape)
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, DRIVER) is None


@pytest.mark.parametrize("driver", [12080, 11080])
def test_an_older_cuda_major_version_is_refused(built, driver):
    assert kb.Bundle(built[0]).binary("cg.cu", {}, 90, driver) is None
    assert kb.Bundle(built[0]).binary("cg.cu", {}, 130, driver) is None


def test_a_later_driver_loads_the_binaries(built):
    assert kb.Bundle(built[0]).binary("cg.cu", {}, 90, 14000)[0] == "sm_90"
    assert kb.Bundle(built[0]).binary("cg.cu", {}, 130, 14000)[0] == "compute_120"


def test_ptx_needs_a_driver_as_new_as_its_nvrtc(built):
    major, minor = (int(x) for x in build_kernels.nvrtc_version().split("."))
    newest = major * 1000 + minor * 10
    assert kb.Bundle(built[0]).binary("cg.cu", {}, 130, newest)[0] == "compute_120"
    if minor:
        assert kb.Bundle(built[0]).binary("cg.cu", {}, 130, newest - 10) is None
        assert kb.Bundle(built[0]).binary("cg.cu", {}, 90, newest - 10)[0] == "sm_90"  # CUBIN: minor versions ok


def test_a_bundle_of_another_nvrtc_version_finds_nothing(copy):
    _rewrite(copy, lambda manifest: manifest.update(nvrtc="12.8"))  # keys were made with the real version
    assert kb.Bundle(copy).binary("cg.cu", {}, 90, 12080) is None


@pytest.mark.parametrize("text", ["{", "[]", '{"format": 99, "nvrtc": "13.0", "entries": []}', '{"format": 1}'])
def test_an_unreadable_manifest_means_no_bundle(tmp_path, text):
    (tmp_path / kb.MANIFEST).write_text(text)
    assert kb.Bundle(tmp_path).entries == {}
    assert kb.Bundle(tmp_path).binary("cg.cu", {}, 90, DRIVER) is None
    assert kb.Bundle(tmp_path / "absent").binary("cg.cu", {}, 90, DRIVER) is None


def test_an_include_with_a_comment_is_expanded_too(tmp_path, monkeypatch):
    header = "#pragma once\n#define A 1\n"
    (tmp_path / "a.cuh").write_text(header)
    (tmp_path / "b.cu").write_text('#include "a.cuh"  // the A\n  #  include "a.cuh"\n#include <cuda_fp16.h>\nint b;\n')
    monkeypatch.setattr(kb, "KERNEL_DIR", tmp_path)
    assert kb.expanded_source("b.cu") == f"{header}\n{header}\n#include <cuda_fp16.h>\nint b;\n"


def test_the_source_hash_covers_every_included_header(tmp_path, monkeypatch):
    for path in [*kernels.kernel_files(), *kernels.header_files()]:
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(kb, "KERNEL_DIR", tmp_path)
    text = kb.expanded_source("fhd.cu")
    assert '#include "mri_recon_phase.cuh"' not in text
    assert (tmp_path / "mri_recon_phase.cuh").read_text() in text
    header = tmp_path / "mri_recon_phase.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    assert kb.expanded_source("fhd.cu") != text
    assert kb.expanded_source("cg.cu") == (tmp_path / "cg.cu").read_text()  # includes nothing of ours


def test_the_plan_covers_every_registry_entry_for_every_target():
    planned = {(f, tuple(sorted(d.items())), t) for f, d, t in build_kernels.plan()}
    wanted = {(f, tuple(sorted(d.items())), t) for f, d in registry.configurations() for t in kb.TARGETS}
    assert planned == wanted and len(planned) == len(registry.configurations()) * len(kb.TARGETS)
    assert set(kb.TARGETS) >= {"sm_80", "sm_90", "sm_100", "compute_120"}


def test_check_finds_missing_and_altered_entries(copy):
    assert build_kernels.check(copy, FILES) == []
    problems = build_kernels.check(copy)  # the whole registry: only prox.cu and cg.cu were built
    assert len(problems) == (len(registry.configurations()) - 2) * len(kb.TARGETS)
    entry = _entry(copy, "prox.cu", "sm_100")
    (copy / entry["binary"]).write_bytes(lzma.compress(b"x"))
    assert build_kernels.check(copy, FILES) == [f"altered or unreadable: {entry['binary']} (prox.cu sm_100)"]


def test_two_builds_write_the_same_bytes(built, tmp_path):
    out, _ = built
    again = tmp_path / "again"
    build_kernels.build(again, FILES, jobs=1)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert all((out / n).read_bytes() == (again / n).read_bytes() for n in names)
    build_kernels.build(again, FILES, jobs=1)  # a rebuild over an intact bundle keeps it as it is
    assert all((out / n).read_bytes() == (again / n).read_bytes() for n in names)


def test_the_shipped_bundle_matches_the_sources():
    """The bundle committed with the sources holds every module of a default reconstruction for every target,
    built from these very sources (after a kernel change: python scripts/build_kernels.py --defaults); a
    release build's bundle holds the whole registry, and must be current too."""
    assert build_kernels.check(kb.BUNDLE_DIR, defaults=True) == []
    if len(kb.Bundle(kb.BUNDLE_DIR).entries) > len(build_kernels.plan(defaults=True)):
        assert build_kernels.check(kb.BUNDLE_DIR) == []


def test_the_defaults_are_what_a_default_reconstruction_builds():
    from mri_recon.operators.engines.registry import engine
    from mri_recon.stages.state import default_kernels, run_kernels

    shipped = {(f, tuple(sorted(d.items()))) for f, d in default_kernels()}
    for method, dim, coils in [("nufft", 2, 8), ("nufft", 3, 1), ("exact", 2, 3), ("exact", 3, 8)]:
        needed = run_kernels(engine(method, "gpu"), dim, coils)
        assert {(f, tuple(sorted(d.items()))) for f, d in needed} <= shipped
    assert ("arith.cu", ()) in shipped and all(registry.contains(f, dict(d)) for f, d in shipped)


# ----------------------------------------------------------------------------------------------------
# The loader: a fake CuPy records which path it takes


class FakeCupy:
    """Enough of CuPy for ``kernels._build``: a device of ``capability``, a driver, and RawModules that record
    whether they came from a file (the bundle) or from source (NVRTC)."""

    def __init__(self, capability, driver, fail_path=False):
        fake = self

        class Device:
            def __init__(self, index=0):
                self.compute_capability = str(capability)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class RawModule:
            def __init__(self, code=None, path=None, options=()):
                self.code, self.path = code, path
                self.data = Path(path).read_bytes() if path else None

            def compile(self):
                if self.path and fail_path:
                    raise RuntimeError("CUDA_ERROR_NO_BINARY_FOR_GPU")
                fake.compiled.append("file" if self.path else "nvrtc")

        class Runtime:
            @staticmethod
            def driverGetVersion():  # noqa: N802 - CuPy's name
                return driver

        class Cuda:
            pass

        self.compiled: list[str] = []
        self.RawModule = RawModule
        self.cuda = Cuda()
        self.cuda.Device, self.cuda.runtime = Device, Runtime
        self.cuda.compiler = type("compiler", (), {"CompileException": type("CompileException", (Exception,), {})})


def _install(monkeypatch, directory, cupy):
    monkeypatch.setattr(kb, "installed", lambda: kb.Bundle(directory))
    monkeypatch.setattr(kernels, "cupy_module", lambda: cupy)


@pytest.mark.parametrize(("capability", "driver", "switch", "fail_path", "expected"), [
    (90, DRIVER, "1", False, "file"),
    (90, DRIVER, "0", False, "nvrtc"),  # MRI_RECON_PRECOMPILED=0
    (90, 12080, "1", False, "nvrtc"),  # another CUDA major version
    (110, DRIVER, "1", False, "nvrtc"),  # no binary this device runs
    (90, DRIVER, "1", True, "nvrtc"),  # the driver refused the file
], ids=["bundle", "switched-off", "cuda-12-driver", "sm_110", "load-fails"])
def test_the_loader_falls_back_to_nvrtc(built, monkeypatch, capability, driver, switch, fail_path, expected):
    cupy = FakeCupy(capability, driver, fail_path)
    monkeypatch.setenv(kb.ENV_SWITCH, switch)
    _install(monkeypatch, built[0], cupy)
    module = kernels._build("cg.cu", (), 0)
    assert cupy.compiled[-1] == expected
    if expected == "file":
        assert module.data == kb.Bundle(built[0]).binary("cg.cu", {}, capability, driver)[1]
    else:
        assert module.code == kernels.source("cg.cu") and module.path is None


def test_the_loader_refuses_a_tampered_binary(copy, monkeypatch):
    entry = _entry(copy, "cg.cu", "sm_90")
    (copy / entry["binary"]).write_bytes(lzma.compress(b"\x7fELF tampered"))
    cupy = FakeCupy(90, DRIVER)
    monkeypatch.setenv(kb.ENV_SWITCH, "1")
    _install(monkeypatch, copy, cupy)
    kernels._build("cg.cu", (), 0)
    kernels._build("prox.cu", (), 0)
    assert cupy.compiled == ["nvrtc", "file"]
