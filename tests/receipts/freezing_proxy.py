"""A TCP proxy on 127.0.0.1 that can stop passing bytes: a database that hangs without closing anything
(``devstack.tcp_gate``, frozen). Stopping PostgreSQL would refuse connections, a different fault,
already covered."""

from __future__ import annotations

from devstack.tcp_gate import TcpGate as FreezingProxy

__all__ = ["FreezingProxy"]
