"""CuPy's own kernels: recording their compile requests and the options CuPy adds (no GPU)."""

from __future__ import annotations

import threading

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

    def __init__(self):
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def _compile_module_with_cache(self, source, options=(), **kwargs):
        with self.lock:
            self.calls.append((source, tuple(options), kwargs))
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


@pytest.mark.parametrize("text", ["{", "[]", '{"format": 2, "cupy": "99.1", "requests": []}', '{"format": 1}'])
def test_an_unreadable_record_is_ignored(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert ck.recorded(path) == ("", ())
