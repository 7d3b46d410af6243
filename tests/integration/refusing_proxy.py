"""A TCP proxy on 127.0.0.1 that can refuse connections: a provider, a relay or a webhook endpoint that
is down (``devstack.tcp_gate``: ``refuse()``, then ``accept()`` on the same port)."""

from __future__ import annotations

from devstack.tcp_gate import TcpGate as RefusingProxy

__all__ = ["RefusingProxy"]
