"""``mri-recon cache info|clear``: the point-spread-function cache."""

from __future__ import annotations

from pathlib import Path

import click

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
    click.echo(f"folder   {info.directory}\nentries  {info.entries}\n"
               f"size     {info.total_bytes} bytes ({human_bytes(info.total_bytes)})\n"
               f"cap      {info.max_bytes} bytes ({human_bytes(info.max_bytes)}; MRI_RECON_CACHE_MAX)")
    if info.problem is not None:
        click.echo(f"refused  {info.problem}: not used until only you may write it (chmod 700)")


@cache.command("clear")
@settings_option("cache_dir")
@friendly
def cache_clear(cache_dir: Path | None) -> None:
    """Remove the cache's own entries, lock files and abandoned temporary files; nothing else in the folder."""
    from ..io.cache import PsfCache

    store = PsfCache(cache_dir)
    removed = store.clear()
    click.echo(f"removed {len(removed)} file(s) from {store.directory}")
