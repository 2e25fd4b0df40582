"""Compare the images two runs of scripts/image_hashes.py saved (``--save``): bit for bit, else the relative
L2 difference, beside the spread between two runs of the first commit when a third folder is given.

Usage: python scripts/compare_images.py BEFORE_DIR AFTER_DIR [BEFORE_AGAIN_DIR] OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(a.ravel()), 1e-30))


def main() -> int:
    *folders, out = sys.argv[1:]
    before, after = Path(folders[0]), Path(folders[1])
    again = Path(folders[2]) if len(folders) > 2 else None
    result = {}
    for path in sorted(before.glob("*.npy")):
        a, b = np.load(path), np.load(after / path.name)
        line = {"identical": bool(np.array_equal(a, b)), "rel_diff": relative(a, b)}
        if again is not None:
            line["run_to_run"] = relative(a, np.load(again / path.name))
        result[path.name] = line
        print(path.name, line)
    Path(out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
