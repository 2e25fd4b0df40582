"""CuPy's own kernels precompiled: the bundle holds what CuPy writes, CuPy finds what is installed, and every
reason an entry is not installed (no GPU: CuPy compiles for an explicit architecture)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers import load_script

from mri_recon.kernels import cupy_bundle as cb
from mri_recon.kernels import cupy_kernels as ck

pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="NVRTC comes with the 'test' extra")
cupy = pytest.importorskip("cupy")
compiler = pytest.importorskip("cupy.cuda.compiler")
from cupy._core.core import assemble_cupy_compiler_options as assemble  # noqa: E402
from cupy.cuda._compiler_cache import DiskKernelCacheBackend, KernelCacheBackend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHOSEN = (0, 38)  # an elementwise kernel and a CUB pass with options of its own
ARCHS = ("80", "90")


def _script():
    return load_script("build_kernels")


build_kernels = _script()


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    """Two requests of the committed record, under this CuPy's version (the sources are what they are)."""
    data = json.loads(ck.RECORD_FILE.read_text())
    requests = [data["requests"][i] for i in CHOSEN]
    path = tmp_path_factory.mktemp("record") / "cupy_kernels.json"
    path.write_text(json.dumps({"format": ck.FORMAT, "cupy": cupy.__version__, "requests": requests}))
    return path


@pytest.fixture(scope="module")
def built(record, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "cupy"
    return out, build_kernels.build_cupy(out, record, ARCHS, jobs=2)


@pytest.fixture
def bundle(built, tmp_path, monkeypatch):
    """A private copy of the built bundle (that a test may damage), with CuPy's ``-arch`` choice computed
    without a device."""
    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc", build_kernels.arch_options)
    copy = tmp_path / "cupy"
    shutil.copytree(built[0], copy)
    return copy


def _rewrite(directory: Path, change) -> None:
    manifest = json.loads((directory / cb.MANIFEST).read_text())
    change(manifest)
    (directory / cb.MANIFEST).write_text(json.dumps(manifest))


def _names(directory: Path, arch: str) -> set[str]:
    manifest = json.loads((directory / cb.MANIFEST).read_text())
    return {e["name"] for e in manifest["entries"] if e["arch"] == arch}


class _Found(Exception):  # noqa: N818 - stops CuPy after its cache lookup (loading needs a device)
    pass


class Lookup(KernelCacheBackend):
    """CuPy's disk backend on ``folder``, stopping CuPy at its first lookup with what it found."""

    def __init__(self, folder):
        self.disk = DiskKernelCacheBackend(str(folder))

    def load(self, name):
        raise _Found(name, self.disk.load(name))

    def save(self, name, cubin, source):
        raise AssertionError("CuPy did not look up its cache")


def _cupy_lookup(monkeypatch, folder, request, arch):
    """``(name, payload)`` CuPy's own ``_compile_with_cache_cuda`` looks up in ``folder`` for ``request``."""
    monkeypatch.setattr(compiler, "_kernel_cache_backend", Lookup(folder))
    with pytest.raises(_Found) as found:
        compiler._compile_with_cache_cuda(request["source"], tuple(assemble(tuple(request["options"]))), arch,
                                          request.get("extra_source"), request.get("backend") or "nvrtc")
    return found.value.args


def test_cupy_finds_and_verifies_every_installed_kernel(bundle, record, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    written = cb.install_arch("90", cache, bundle, record)
    assert set(written) == _names(bundle, "90") and len(written) == len(CHOSEN)
    for request in ck.recorded(record)[1]:
        name, payload = _cupy_lookup(monkeypatch, cache, request, "90")
        assert name in written and payload is not None  # CuPy's own name, and its hash check passed
        assert payload.startswith(b"\x7fELF")
    assert not list(cache.glob("*.part"))  # no temporary file left behind


def test_the_build_names_files_as_cupy_and_stores_cupys_bytes(built, record):
    out, manifest = built
    assert {e["arch"] for e in manifest["entries"]} == set(ARCHS)
    assert manifest["cupy"] == cupy.__version__ and manifest["nvrtc"] == build_kernels.nvrtc_version()
    for entry in manifest["entries"]:
        data = (out / entry["file"]).read_bytes()
        assert entry["file"] == f"sm_{entry['arch']}/{entry['name']}"
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert data[:40] == hashlib.sha1(data[40:]).hexdigest().encode()  # CuPy's on-disk format
        assert not any("site-packages" in option or "/usr/" in option for option in entry["options"])


def test_two_builds_write_the_same_bytes(built, record, tmp_path):
    again = build_kernels.build_cupy(tmp_path / "cupy", record, ("90",), jobs=1)
    first = {e["name"]: e["sha256"] for e in built[1]["entries"] if e["arch"] == "90"}
    assert {e["name"]: e["sha256"] for e in again["entries"]} == first


def test_only_the_devices_architecture_is_installed(bundle, record, tmp_path):
    assert set(cb.install_arch("80", tmp_path / "a", bundle, record)) == _names(bundle, "80")
    assert cb.install_arch("100", tmp_path / "b", bundle, record) == []
    assert _names(bundle, "80").isdisjoint(_names(bundle, "90"))


def test_a_tampered_file_is_not_installed(bundle, record, tmp_path):
    manifest = json.loads((bundle / cb.MANIFEST).read_text())
    victim = next(e for e in manifest["entries"] if e["arch"] == "90")
    path = bundle / victim["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    written = cb.install_arch("90", tmp_path / "cache", bundle, record)
    assert victim["name"] not in written and len(written) == len(CHOSEN) - 1
    assert not (tmp_path / "cache" / victim["name"]).exists()


@pytest.mark.parametrize("field", ["cupy", "nvrtc", "cupy_cache_key", "nvrtc_build"])
def test_a_bundle_of_another_cupy_or_nvrtc_is_not_installed(bundle, record, tmp_path, field):
    other = {"cupy": "13.0.0", "nvrtc_build": {"90": hashlib.sha256(b"another NVRTC").hexdigest()}}
    _rewrite(bundle, lambda m: m.update({field: other.get(field, "12.0")}))
    assert cb.install_arch("90", tmp_path / "cache", bundle, record) == []


@pytest.mark.parametrize("change", ["target", "options", "source", "arch-of-file", "escape"])
def test_an_entry_that_does_not_hold_here_is_not_installed(bundle, record, tmp_path, change):
    def alter(manifest):
        entry = next(e for e in manifest["entries"] if e["arch"] == "90" and e["request"] == 0)
        if change == "target":
            entry["target"] = ["-arch=compute_90", "ptx"]
        elif change == "options":
            entry["options"] = [o.replace("-I{cupy}", "-I{other}") for o in entry["options"]]
        elif change == "source":
            entry["source_sha256"] = hashlib.sha256(b"another kernel").hexdigest()
        elif change == "arch-of-file":  # an sm_80 file listed as the sm_90 build: its sha256 is sm_80's
            other = next(e for e in manifest["entries"] if e["arch"] == "80" and e["request"] == 0)
            entry["file"] = other["file"]
        else:
            entry["file"] = "../../outside.cubin"

    _rewrite(bundle, alter)
    assert len(cb.install_arch("90", tmp_path / "cache", bundle, record)) == len(CHOSEN) - 1


def test_a_users_file_is_never_replaced(bundle, record, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    name = sorted(_names(bundle, "90"))[0]
    (cache / name).write_bytes(b"the user's own")
    written = cb.install_arch("90", cache, bundle, record)
    assert name not in written and len(written) == len(CHOSEN) - 1
    assert (cache / name).read_bytes() == b"the user's own"


def test_other_cuda_headers_change_the_template(tmp_path):
    for folder, text in (("a", "#define CUDART_VERSION 13000"), ("b", "#define CUDART_VERSION 12080")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cuda_runtime_api.h").write_text(text)
    root = cb.cupy_include_root()
    a, b = (cb.template((f"-I{root}/cupy", f"-I{tmp_path / f}", "-DX=1"), root) for f in "ab")
    assert a[0] == b[0] == "-I{cupy}/cupy" and a[2] == "-DX=1"
    assert a[1] != b[1]


class FakeCupy:
    __version__ = cupy.__version__

    class cuda:  # noqa: N801 - stands for cupy.cuda
        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False


@pytest.fixture
def cupy_cache(bundle, tmp_path, monkeypatch):
    """CUPY_CACHE_DIR set to an empty folder and CuPy's disk backend created from it, as at CuPy's import."""
    folder = tmp_path / "cupy-cache"
    monkeypatch.setenv("CUPY_CACHE_DIR", str(folder))
    for name in ("CUPY_CACHE_IN_MEMORY", "MRI_RECON_PRECOMPILED", cb.ENV_SWITCH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(compiler, "_kernel_cache_backend", DiskKernelCacheBackend())
    monkeypatch.setattr(compiler, "_get_arch", lambda: "90")
    monkeypatch.setattr(cb, "_INSTALLED", set())
    return folder


def test_installation_fills_cupy_cache_dir_once_per_process(bundle, record, cupy_cache):
    written = cb.install(FakeCupy, 0, bundle, record)
    assert set(written) == _names(bundle, "90")
    assert {p.name for p in cupy_cache.iterdir()} == set(written)
    assert cb.install(FakeCupy, 0, bundle, record) == []


@pytest.mark.parametrize("setting", ["MRI_RECON_PRECOMPILED", cb.ENV_SWITCH, "CUPY_CACHE_IN_MEMORY", "backend"])
def test_installation_is_switched_off(bundle, record, cupy_cache, monkeypatch, setting):
    if setting == "backend":
        monkeypatch.setattr(compiler, "_kernel_cache_backend", Lookup(cupy_cache))  # a custom backend
    else:
        monkeypatch.setenv(setting, "1" if setting == "CUPY_CACHE_IN_MEMORY" else "0")
    assert cb.install(FakeCupy, 0, bundle, record) == []
    assert not cupy_cache.exists() or not any(cupy_cache.iterdir())


def test_the_cubin_does_not_depend_on_where_cupy_is_installed(record, tmp_path):
    """The template drops CuPy's install path from the options: the same request compiled with CuPy's headers
    reached through another path (a link) gives the same CUBIN, under another CuPy file name."""
    root = cb.cupy_include_root()
    (tmp_path / "elsewhere").symlink_to(root, target_is_directory=True)
    request = ck.recorded(record)[1][0]
    moved = [o.replace(root, str(tmp_path / "elsewhere")) for o in assemble(tuple(request["options"]))]
    results = []
    with build_kernels.cupy_without_device() as comp:
        for options in (tuple(assemble(tuple(request["options"]))), tuple(moved)):
            try:
                comp._compile_with_cache_cuda(request["source"], options, "90", request.get("extra_source"))
            except build_kernels._Captured as captured:
                results.append((captured.name, captured.payload))
    assert len(results) == 2 and results[0][0] != results[1][0]
    assert results[0][1] == results[1][1]
    assert cb.template(tuple(moved) + ("-ftz=true",), str(tmp_path / "elsewhere")) == \
        cb.template(cb.cupy_options(assemble, request), root)


def test_rebuilding_mri_recons_modules_keeps_cupys_kernels(built, tmp_path):
    out = tmp_path / "bundle"
    shutil.copytree(built[0], out / "cupy")
    build_kernels.build(out, {"prox.cu"}, jobs=1, targets=("sm_90",))
    assert (out / "cupy" / cb.MANIFEST).read_bytes() == (built[0] / cb.MANIFEST).read_bytes()
    assert (out / "manifest.json").is_file()
