"""A third-party MRD client against ``mri-recon serve``: python-ismrmrd-server's ``client.py``, unmodified.

``client.py`` and the two modules it imports from its repository (``connection.py``, ``constants.py``) are
extracted at run time from the local mirror of kspaceKelvin/python-ismrmrd-server (``git show HEAD:...``, or
``--source DIR`` holding them) into a temporary folder, never into this repository. The script simulates an
MRD scan (noise, several slices), starts ``mri-recon serve --port 0``, runs

    python client.py SCAN -a 127.0.0.1 -p PORT -o OUT -G dataset -c default

and compares every image in OUT (data, every header field but ``attribute_string_len``, meta attributes) with
``mri-recon reconstruct SCAN -o REF.mrd.h5``. ``attribute_string_len`` differs by design: the stream's header
carries the length of the attribute string after it (``ismrmrd``'s serializer sets it); the file writer
(``ismrmrd.Dataset.append_image``) leaves 0. JSON on stdout (or ``--json``).

    python scripts/server_thirdparty.py --json thirdparty.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ismrmrd
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchtools import child_env, start_server, write_report  # noqa: E402

from mri_recon.io.ismrmrd_write import write_ismrmrd  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402

MIRROR = Path("/work/.mirror/kspaceKelvin+python-ismrmrd-server/repo")
FILES = ("client.py", "connection.py", "constants.py")
"""client.py and the repository modules it imports (connection imports constants)."""


def extract(folder: Path, source: Path | None) -> str:
    """Put the client's files into ``folder``; returns where they came from (commit or folder)."""
    for name in FILES:
        if source is not None:
            text = (source / name).read_bytes()
        else:
            text = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:{name}"], check=True,
                                  capture_output=True).stdout
        (folder / name).write_bytes(text)
    if source is not None:
        return str(source)
    return subprocess.run(["git", "-C", str(MIRROR), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def read_images(path: Path, group: str = "dataset") -> list:
    with ismrmrd.Dataset(str(path), group, create_if_needed=False, mode="r") as dataset:
        series = [name for name in dataset.list() if name.startswith("image_")]
        return [dataset.read_image(s, i) for s in sorted(series) for i in range(dataset.number_of_images(s))]


def fields(image) -> dict:
    head = image.getHead()
    out = {name: (list(getattr(head, name)) if hasattr(getattr(head, name), "__len__") else getattr(head, name))
           for name, _ in head._fields_}
    out.pop("attribute_string_len")
    return out


def compare(got: list, want: list) -> dict:
    pairs = list(zip(got, want))
    worst = max((float(np.max(np.abs(a.data.astype(np.complex128) - b.data))) for a, b in pairs), default=None)
    return {"images_returned": len(got), "images_expected": len(want),
            "data_bit_for_bit": len(got) == len(want) and all(a.data.tobytes() == b.data.tobytes() for a, b in pairs),
            "headers_equal": all(fields(a) == fields(b) for a, b in pairs),
            "meta_equal": all(a.attribute_string == b.attribute_string for a, b in pairs),
            "max_abs_difference": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=None, help="Folder holding client.py (default: the mirror).")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--matrix", type=int, default=64)
    parser.add_argument("--coils", type=int, default=8)
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        origin = extract(tmp, args.source)
        scan = tmp / "scan.mrd.h5"
        write_ismrmrd(scan, [({"slice": s}, simulate_scan((args.matrix, args.matrix), "golden", coils=args.coils,
                                                          snr=30.0, seed=s)) for s in range(args.slices)])
        ref = tmp / "ref.mrd.h5"
        subprocess.run([sys.executable, "-m", "mri_recon", "reconstruct", str(scan), "-o", str(ref), "--device",
                        args.device, "-q"], check=True, env=child_env())
        server, port = start_server(tmp / "server.log", args.device)
        try:
            started = time.perf_counter()
            client = subprocess.run([sys.executable, "client.py", str(scan), "-a", "127.0.0.1", "-p", str(port),
                                     "-o", str(tmp / "out.h5"), "-G", "dataset", "-c", "default"],
                                    cwd=tmp, capture_output=True, text=True, timeout=600)
            seconds = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(60)
        report = {"client": f"python-ismrmrd-server {'/'.join(FILES)} at {origin}, unmodified",
                  "client_exit_code": client.returncode, "client_seconds": round(seconds, 2),
                  "scan": {"matrix": args.matrix, "coils": args.coils, "slices": args.slices, "device": args.device},
                  **(compare(read_images(tmp / "out.h5"), read_images(ref)) if client.returncode == 0 else {}),
                  "client_log_tail": (client.stdout + client.stderr).splitlines()[-6:],
                  "server_log": [line for line in (tmp / "server.log").read_text().splitlines()
                                 if "image" in line or "ERROR" in line][:10]}
    write_report(report, args.json)


if __name__ == "__main__":
    main()
