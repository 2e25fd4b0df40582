"""The server on a GPU: its images against ``mri-recon reconstruct --device gpu`` of the same file, and against
the CPU's, and concurrent clients taking turns on one GPU (skipped without CuPy and a GPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import relative
from server_helpers import image_of, make_scan, reference, running_server

from mri_recon.server.client import send_scan

pytestmark = pytest.mark.gpu


def test_gpu_server_images_match_reconstruct_on_the_gpu(tmp_path):
    path = make_scan(tmp_path / "scan.mrd.h5", 21, slices=2, matrix=64)
    gpu_ref = reference(path, tmp_path, "--device", "gpu")
    cpu_ref = reference(path, tmp_path)
    with running_server(device="gpu") as srv:
        replies: dict[int, list] = {}

        def client(i: int) -> None:
            replies[i] = send_scan(path, *srv.address)[1].images

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    for images in replies.values():
        assert len(images) == 2
        for got, want, cpu in zip(images, gpu_ref, cpu_ref):
            assert relative(image_of(got), image_of(want)) < 1e-5  # same GPU pipeline (atomics may reorder sums)
            assert relative(image_of(got), image_of(cpu)) < 1e-4  # the GPU against the CPU twin (as test_recon)
            assert np.array_equal([got.slice, got.image_series_index], [want.slice, want.image_series_index])
