"""Who is connecting: the local user behind a TCP connection, for a server that serves only its own user.

On Linux the kernel lists every TCP socket with its owner's uid in ``/proc/net/tcp`` and ``/proc/net/tcp6``;
the peer's socket is the line whose local address is the connection's remote end and whose remote address is
its local end, held by a process (a socket already closed is listed under uid 0 and is not taken). A peer
on another machine (or a system without those files) has no uid to find here: it is refused.
"""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _hex4(host: str, port: int) -> str:
    return socket.inet_aton(host)[::-1].hex().upper() + f":{port:04X}"


def _hex6(host: str, port: int) -> str:
    raw = socket.inet_pton(socket.AF_INET6, host.split("%")[0])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # four host-order 32-bit words
    return b"".join(words).hex().upper() + f":{port:04X}"


def _spellings(address: tuple) -> set[str]:
    """How ``/proc/net/tcp*`` writes an address (an IPv4 one also as IPv6-mapped)."""
    host, port = address[0], int(address[1])
    if ":" in host:
        names = {_hex6(host, port)}
        if host.startswith("::ffff:") and "." in host:
            names.add(_hex4(host[7:], port))
        return names
    return {_hex4(host, port), _hex6(f"::ffff:{host}", port)}


def peer_uid(conn: socket.socket) -> int | None:
    """The uid of the local process's socket at the other end of ``conn``, or None when it cannot be found
    (a remote peer, no ``/proc``)."""
    try:
        mine, theirs = _spellings(conn.getsockname()), _spellings(conn.getpeername())
    except OSError:
        return None
    for table in TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # a socket a process still holds (inode not 0; half-closed ones too): a closed one lingering in
            # TIME_WAIT or an orphaned FIN_WAIT2 is listed under uid 0
            if len(fields) > 9 and fields[1] in theirs and fields[2] in mine and fields[9] != "0":
                return int(fields[7])
    return None


def parse_users(text: str) -> frozenset[int] | None:
    """``--allow-users``: ``any`` (None: every peer), or user names and uids separated by commas; the
    server's own user is always among them. Raises ``ValueError`` naming an unknown user."""
    if text.strip().lower() == "any":
        return None
    uids = {os.getuid()}
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word.isdigit():
            uids.add(int(word))
            continue
        try:
            uids.add(pwd.getpwnam(word).pw_uid)
        except KeyError:
            raise ValueError(f"no user named {word!r}") from None
    return frozenset(uids)


def user_name(uid: int | None) -> str:
    """A uid as ``name (uid)``, or ``unknown`` for None."""
    if uid is None:
        return "unknown"
    try:
        return f"{pwd.getpwuid(uid).pw_name} ({uid})"
    except KeyError:
        return str(uid)
