"""Connecting to Temporal with Herald's data converter, from settings alone.

The same function serves the worker, the client API, the receipt server and
the tests, so the converter is set identically everywhere: pydantic for values,
then, when keys are configured, AES-256-GCM for the bytes (herald/privacy/payload_codec.py),
so recipients and bodies never reach Temporal's history in plaintext; failure
messages and stack traces are encoded the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from temporalio.client import Client, Interceptor, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.runtime import Runtime

from herald.privacy.payload_codec import EncryptionCodec
from herald.settings import CodecSettings, TemporalSettings


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    if not (settings.tls or settings.api_key):
        return False
    key_data = settings.tls_key_data.get_secret_value() if settings.tls_key_data else None
    return TLSConfig(
        server_root_ca_cert=settings.tls_ca_path.read_bytes() if settings.tls_ca_path else settings.tls_ca_data,
        client_cert=settings.tls_cert_path.read_bytes() if settings.tls_cert_path else settings.tls_cert_data,
        client_private_key=settings.tls_key_path.read_bytes() if settings.tls_key_path else key_data,
        domain=settings.tls_server_name,
    )


def payload_codec(settings: CodecSettings) -> EncryptionCodec | None:
    """The keyring codec, or None when no key is configured (payloads stay plaintext)."""
    return EncryptionCodec.configured(settings.keys, settings.active_key)


def data_converter(settings: TemporalSettings) -> DataConverter:
    """The one converter every client, worker, test environment, replayer and codec server of Herald uses.

    A failure's message and stack trace travel as an encoded payload (the SDK's encoded attributes),
    through the codec like any other payload: an exception's text can quote what it was given (a
    template field, a provider's answer), and Temporal's history keeps it. The history's own message
    field reads "Encoded failure"; the payload opens through the codec as any other does (the codec
    server's, for the Web UI).
    """
    codec = payload_codec(settings.codec)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


async def connect(
    settings: TemporalSettings,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
    lazy: bool = False,
) -> Client:
    """A client; `runtime` carries the worker's metrics endpoint, `interceptors` its tracing
    (both from the process's composition root; workers built from this client inherit them).
    `lazy` connects on the first call instead of now (a reader that must start without the server)."""
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=data_converter(settings),
        tls=tls_config(settings),
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        rpc_metadata={name: value.get_secret_value() for name, value in settings.rpc_metadata.items()},
        runtime=runtime,
        interceptors=interceptors,
        lazy=lazy,
    )
