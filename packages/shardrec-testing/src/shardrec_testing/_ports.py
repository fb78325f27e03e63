"""Free TCP ports on the loopback interface for process-group rendezvous."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    The OS picks the port (bind to port 0); the socket is closed before returning, so another
    process could in principle take it first. The rank pool retries its rendezvous on a fresh port
    when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
