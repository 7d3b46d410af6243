"""Connecting to Temporal with Herald's data converter, from settings alone.

The same function serves the worker, the client API, the receipt server and
the tests, so the pydantic converter is set identically everywhere.
"""

from __future__ import annotations

from temporalio.client import Client, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter

from herald.settings import TemporalSettings


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    if not (settings.tls or settings.api_key):
        return False
    return TLSConfig(
        server_root_ca_cert=settings.tls_ca_path.read_bytes() if settings.tls_ca_path else None,
        client_cert=settings.tls_cert_path.read_bytes() if settings.tls_cert_path else None,
        client_private_key=settings.tls_key_path.read_bytes() if settings.tls_key_path else None,
    )


async def connect(settings: TemporalSettings) -> Client:
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=pydantic_data_converter,
        tls=tls_config(settings),
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
    )
