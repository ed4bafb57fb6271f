"""Where the bot's HTTP servers listen: on a socket handed over by whoever started the process,
when one is bound to the address asked for, else on a port they bind themselves.

The hand-over is systemd's socket activation protocol: listening sockets from file descriptor
3 on, `LISTEN_FDS` of them, meant for the process `LISTEN_PID` names (when set). A supervisor
that binds first (systemd, or a test that binds port 0 and passes the socket on) never loses
the port to another process between choosing it and the bot's start, and may bind ports the
bot itself could not. Without `LISTEN_FDS` nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import socket

from aiohttp import web

FIRST_FD = 3  # SD_LISTEN_FDS_START
# Connections the kernel queues on a socket several serving processes share (`bot.processes`):
# a burst of clicks' connections waits there for whichever process accepts next.
SHARED_BACKLOG = 1024
# Connections a serving process accepts from that socket per wake-up (asyncio's default is the
# backlog: the first process to wake took a whole burst's connections, and kept them alive).
ACCEPT_BATCH = 8
_handed: list[socket.socket] | None = None


def handed_over() -> list[socket.socket]:
    """The listening sockets this process was started with (read once; the variables are then
    removed, so processes the bot starts, such as its redis-server, do not look for them)."""
    global _handed
    if _handed is not None:
        return _handed
    _handed = []
    count, pid = os.environ.pop("LISTEN_FDS", ""), os.environ.pop("LISTEN_PID", "")
    os.environ.pop("LISTEN_FDNAMES", None)
    if not count.isdigit() or (pid and pid != str(os.getpid())):
        return _handed
    for fd in range(FIRST_FD, FIRST_FD + int(count)):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not open, or not a socket
            continue
        if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6):
            _handed.append(sock)
        else:
            sock.detach()  # not ours to close
    return _handed


def handed_socket(host: str, port: int) -> socket.socket | None:
    """The handed-over socket bound to `host`:`port`, if there is one (port 0 names none)."""
    if port == 0:
        return None
    for sock in handed_over():
        with contextlib.suppress(OSError):
            bound_host, bound_port = sock.getsockname()[:2]
            if bound_port == port and bound_host == host:
                return sock
    return None


async def start_site(
    runner: web.AppRunner, host: str, port: int, *, sock: socket.socket | None = None
) -> int:
    """Serve `runner` on `sock` when given, else on `host`:`port` (on the socket handed over for
    it, if any); the port it listens on (the kernel's choice when `port` is 0). Raises OSError
    when it cannot bind."""
    site: web.BaseSite
    shared = sock is not None
    if sock is not None:  # shared by serving processes: each takes a few connections at a time
        site = web.SockSite(runner, sock, backlog=ACCEPT_BATCH)
    else:
        sock = handed_socket(host, port)
        site = web.SockSite(runner, sock) if sock else web.TCPSite(runner, host, port)
    await site.start()
    if shared and sock is not None:  # (asyncio set the kernel's queue to the batch: back)
        sock.listen(SHARED_BACKLOG)
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else port
