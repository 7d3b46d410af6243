"""The receipt app served by uvicorn on 127.0.0.1 with a recording stand-in for Temporal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from herald.receipts.app import ReceiptEndpoint, build_receipt_server
from herald.settings import InfobipWebhookSettings, ReceiptSettings, TwilioSettings, UnsubscribeSettings
from tests.keys import SESSION_KEYRING


class RecordingClient:
    """Stands in for the Temporal client: records every signal the delivery path sends."""

    def __init__(self) -> None:
        self.signals: list[tuple[str, str, Any]] = []

    def get_workflow_handle(self, workflow_id: str) -> RecordingClient._Handle:
        return RecordingClient._Handle(self, workflow_id)

    class _Handle:
        def __init__(self, client: RecordingClient, workflow_id: str) -> None:
            self._client, self._workflow_id = client, workflow_id

        async def signal(self, name: str, arg: Any) -> None:
            self._client.signals.append((self._workflow_id, name, arg))


@asynccontextmanager
async def receipt_app(
    pool: AsyncConnectionPool,
    *,
    public_key: str | None = None,
    hold_seconds: float = 0.0,
    auth_token: str = "unused-by-these-tests",
    public_url: str = "http://127.0.0.1",
    store_timeout: float = ReceiptSettings().store_timeout,
    twilio: TwilioSettings | None = None,
    inbound_replies: bool = False,
    unsubscribe: UnsubscribeSettings | None = None,
    infobip: InfobipWebhookSettings | None = None,
) -> AsyncIterator[tuple[str, RecordingClient]]:
    """The receipt app under uvicorn on a port the OS picks; yields its base URL and the client.

    ``public_url`` is what the endpoint believes the provider called (the URL signatures cover),
    so a test signs against it whatever port the OS picked. ``twilio`` says whose replies are ours
    (None: every signed one); ``inbound_replies`` is HERALD_TWILIO_INBOUND_REPLIES; ``unsubscribe``
    holds the keys unsubscribe links are verified with (None: none, every link refused); ``infobip`` the
keys (and Basic credentials) Infobip's reports are verified with (None: none, every post refused).
    """
    client = RecordingClient()
    receipts = ReceiptSettings(
        public_url=public_url, hold_seconds=hold_seconds, sendgrid_public_key=public_key, store_timeout=store_timeout,
        inbound_replies=inbound_replies, unsubscribe=unsubscribe or UnsubscribeSettings(),
        infobip_webhook=infobip or InfobipWebhookSettings(),
    )  # fmt: skip
    endpoint = ReceiptEndpoint(
        receipts, auth_token=auth_token, pool=pool, client=client, twilio=twilio, keyring=SESSION_KEYRING
    )  # type: ignore[arg-type]
    server = build_receipt_server(endpoint, "127.0.0.1", 0)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", client
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
