"""CuPy's own kernels requested ahead: recording, the options CuPy adds, and when a record is replayed (no GPU)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mri_recon.kernels import cupy_kernels as ck

core = pytest.importorskip("cupy._core.core", reason="CuPy comes with the 'test' extra")
compiler = pytest.importorskip("cupy.cuda.compiler")
assemble = core.assemble_cupy_compiler_options
CUPY_SOURCE = 'extern "C" __global__ void cupy_multiply__float32(float* x) { x[0] *= 2.0f; }'
OURS = 'extern "C" __global__ void mri_recon_cg_dot(float* x) {}'


@pytest.mark.parametrize("options", [(), ("-DX=1",), ("--std=c++17", "-DA=1"), ("-DA=1", "--std=c++14"),
                                     ("--foo", "-I/somewhere", "-DB=2")], ids=str)
def test_the_options_before_cupy_added_its_own_are_recovered(options):
    assert ck.user_options(assemble, assemble(options)) == list(options)


def test_options_cupy_did_not_assemble_are_not_recorded():
    assert ck.user_options(assemble, ("-DX=1",)) is None


class FakeCompiler:
    """Stands for ``cupy.cuda.compiler``: counts the compile requests it receives."""

    def __init__(self, fail=False):
        self.calls: list[tuple] = []
        self.lock = threading.Lock()
        self.fail = fail

    def _compile_module_with_cache(self, source, options=(), **kwargs):
        with self.lock:
            self.calls.append((source, tuple(options), kwargs))
        if self.fail:
            raise RuntimeError("nvrtc: out of memory")
        return "module"


def test_recording_keeps_each_cupy_request_once_and_restores_the_compiler():
    fake = FakeCompiler()
    real = fake._compile_module_with_cache
    with ck.recording(fake, assemble) as requests:
        for _ in range(2):
            assert fake._compile_module_with_cache(CUPY_SOURCE, assemble(("-DN=3",)), backend="nvrtc",
                                                   name_expressions=("f<int>",)) == "module"
        fake._compile_module_with_cache(OURS, assemble(("--std=c++17",)), backend="nvrtc")
    assert fake._compile_module_with_cache == real
    assert len(fake.calls) == 3  # every call still reached CuPy
    assert requests == [{"source": CUPY_SOURCE, "options": ["-DN=3"], "backend": "nvrtc", "extra_source": None,
                         "enable_cooperative_groups": None, "name_expressions": ["f<int>"], "jitify": None}]


class FakeCupy:
    def __init__(self, version):
        self.__version__ = version
        self.devices: list[int] = []
        fake = self

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                fake.devices.append(self.index)

            def __exit__(self, *exc):
                return False

        self.cuda = type("cuda", (), {"Device": Device})


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "cupy_kernels.json"
    requests = [{"source": CUPY_SOURCE, "options": ["-DN=3"], "backend": "nvrtc", "name_expressions": ["f<int>"]},
                {"source": CUPY_SOURCE.replace("2.0f", "3.0f"), "options": [], "backend": None}]
    path.write_text(json.dumps({"format": ck.FORMAT, "cupy": "99.1", "requests": requests}))
    monkeypatch.setattr(ck, "_STARTED", set())
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    monkeypatch.delenv("MRI_RECON_PRECOMPILED", raising=False)
    monkeypatch.delenv(ck.ENV_SWITCH, raising=False)
    ck.recorded.cache_clear()
    yield path
    ck.recorded.cache_clear()


def _replay(monkeypatch, record, fake, version="99.1", device=0):
    monkeypatch.setattr(compiler, "_compile_module_with_cache", fake._compile_module_with_cache)
    cupy = FakeCupy(version)
    with ThreadPoolExecutor(2) as pool:
        futures = ck.prefetch_cupy(cupy, device, pool, record)
        for future in futures:
            assert future.result() is None  # a failure is logged, never raised
    return futures, cupy


def test_a_record_is_replayed_once_per_device_with_this_installations_options(monkeypatch, record):
    fake = FakeCompiler()
    futures, cupy = _replay(monkeypatch, record, fake)
    assert len(futures) == 2 and cupy.devices == [0, 0]
    by_source = {source: (options, kwargs) for source, options, kwargs in fake.calls}
    options, kwargs = by_source[CUPY_SOURCE]
    assert options == assemble(("-DN=3",)) and kwargs["name_expressions"] == ("f<int>",)
    assert by_source[CUPY_SOURCE.replace("2.0f", "3.0f")][1]["backend"] == "nvrtc"
    assert _replay(monkeypatch, record, fake)[0] == []  # the same device again: nothing
    assert len(_replay(monkeypatch, record, fake, device=1)[0]) == 2
    assert len(fake.calls) == 4


@pytest.mark.parametrize("setting", ["other-cupy", "switched-off", "prefetch-off", "in-memory-cache", "no-record"])
def test_a_record_is_not_replayed(monkeypatch, record, setting):
    fake = FakeCompiler()
    if setting == "switched-off":
        monkeypatch.setenv("MRI_RECON_PRECOMPILED", "0")
    elif setting == "prefetch-off":
        monkeypatch.setenv(ck.ENV_SWITCH, "0")
    elif setting == "in-memory-cache":
        monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    elif setting == "no-record":
        record.unlink()
    futures, _ = _replay(monkeypatch, record, fake, version="98.0" if setting == "other-cupy" else "99.1")
    assert futures == [] and fake.calls == []


def test_a_failing_request_costs_nothing(monkeypatch, record):
    fake = FakeCompiler(fail=True)
    futures, _ = _replay(monkeypatch, record, fake)
    assert len(futures) == 2 and len(fake.calls) == 2


@pytest.mark.parametrize("text", ["{", "[]", '{"format": 2, "cupy": "99.1", "requests": []}', '{"format": 1}'])
def test_an_unreadable_record_is_ignored(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert ck.recorded(path) == ("", ())
