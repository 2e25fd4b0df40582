"""The outcome of a batch run: one row per scan, as a table and as JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .task import ScanOutcome


@dataclass(frozen=True)
class BatchReport:
    """What :func:`~mri_recon.batch.reconstruct_many` did."""

    outcomes: Sequence[ScanOutcome]
    """One per scan, in input order."""
    wall_s: float
    """Seconds from the start of the call (including starting a local cluster) to its end."""
    where: str
    """Where the scans ran, in words (``"this process"``, ``"LocalCluster, 2 worker process(es) ..."``)."""
    dashboard: str | None = None
    """The Dask dashboard's address, when there was one."""

    def _with(self, status: str) -> list[ScanOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def done(self) -> list[ScanOutcome]:
        return self._with("done")

    @property
    def skipped(self) -> list[ScanOutcome]:
        return self._with("skipped")

    @property
    def failed(self) -> list[ScanOutcome]:
        return self._with("failed")

    @property
    def ok(self) -> bool:
        """True when no scan failed."""
        return not self.failed

    def headline(self) -> str:
        """One line: counts, wall time, throughput of the scans reconstructed now, and where."""
        rate = f", {len(self.done) / self.wall_s:.2f} scans/s" if self.done and self.wall_s > 0 else ""
        return (f"{len(self.outcomes)} scan(s): {len(self.done)} done, {len(self.skipped)} skipped (complete), "
                f"{len(self.failed)} failed in {self.wall_s:.2f} s{rate} ({self.where})")

    def table(self) -> str:
        """A fixed-width table: status, input, output, seconds, images, iterations, residual, engine, device,
        PSF source, and the reason or note."""
        header = ("status", "input", "output", "s", "images", "iters", "residual", "engine", "device", "psf", "note")
        rows = [header] + [(o.status, Path(o.input).name, Path(o.output).name, f"{o.seconds:.2f}", str(o.images),
                            str(o.iterations), "" if o.final_residual is None else f"{o.final_residual:.1e}",
                            o.engine, o.device, o.psf, o.reason) for o in self.outcomes]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
        return "\n".join(line.rstrip() for line in lines + [self.headline()])

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``--log-json``)."""
        return {"scans": [dataclasses.asdict(o) for o in self.outcomes], "done": len(self.done),
                "skipped": len(self.skipped), "failed": len(self.failed), "wall_s": self.wall_s,
                "where": self.where, "dashboard": self.dashboard}
