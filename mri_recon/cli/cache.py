"""``mri-recon cache info|clear``: the point-spread-function cache."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import printable
from .common import friendly
from .options import settings_option


@click.group()
def cache() -> None:
    """Show or empty the point-spread-function cache (size cap: $MRI_RECON_CACHE_MAX bytes, default 8 GiB)."""


@cache.command("info")
@settings_option("cache_dir")
@friendly
def cache_info(cache_dir: Path | None) -> None:
    """Print the cache's folder, number of entries, total size and cap."""
    from ..io.cache import PsfCache
    from ..planning.planner import human_bytes

    info = PsfCache(cache_dir).info()
    missing = "" if os.path.lexists(info.directory) else " (not created yet: made at the first PSF cached)"
    click.echo(f"folder   {printable(info.directory)}{missing}\nentries  {info.entries}\n"
               f"size     {info.total_bytes} bytes ({human_bytes(info.total_bytes)})\n"
               f"cap      {info.max_bytes} bytes ({human_bytes(info.max_bytes)}; MRI_RECON_CACHE_MAX)")
    if info.problem is not None:
        fix = "choose a folder with --cache-dir" if not os.path.isdir(info.directory) else \
            "not used until only you may write it (chmod 700)"
        click.echo(f"refused  {info.problem}: {fix}")


@cache.command("clear")
@settings_option("cache_dir")
@friendly
def cache_clear(cache_dir: Path | None) -> None:
    """Remove the cache's own entries, lock files and abandoned temporary files; nothing else in the folder."""
    from ..io.cache import PsfCache

    store = PsfCache(cache_dir)
    removed = store.clear()
    click.echo(f"removed {len(removed)} file(s) from {store.directory}")
