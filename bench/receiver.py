"""Status-callback handler for the floor and the naive sender: `python -m bench.receiver`.

What a team without Herald would write: verify Twilio's signature (any public webhook must),
ignore the intermediate `sent` report, and on the final report either signal the floor
workflow named in the URL (`/floor?wf=...`) or insert the delivery row (`/naive?id=...`).
Nothing is stored before the answer except that row; a failure answers 503 so the emulator
redelivers. Settings: the HERALD_* variables, DATABASE_URL, BENCH_RECEIVER_PORT.

E-mail (`/sendgrid`): SendGrid's signed event posts from the bench's ESP, verified with the key
Herald's receipt server has (HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY); `processed` is dropped, and each
final event signals the floor workflow or inserts the naive row its unique args name
(`bench.floor_email`).
"""

from __future__ import annotations

import asyncio
import json
import os

import uvicorn
from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from temporalio.client import Client
from temporalio.service import RPCError

from bench.floor import FloorWorkflow
from bench.floor_email import REF_ARG, VARIANT_ARG
from bench.floor_worker import INSERT_SQL
from herald.providers import sendgrid_signature
from herald.providers.twilio_signature import is_valid_signature

FINAL_STATUSES = frozenset({"delivered", "undelivered", "failed"})
FINAL_EVENTS = frozenset({"delivered", "bounce", "dropped"})


class Receiver:
    def __init__(
        self, auth_token: str, sendgrid_key: str, public_url: str, client: Client, pool: AsyncConnectionPool
    ) -> None:
        self._auth_token = auth_token
        self._sendgrid_key = sendgrid_signature.load_public_key(sendgrid_key)
        self._public_url = public_url.rstrip("/")
        self._client = client
        self._pool = pool

    async def _verified(self, request: Request) -> dict[str, str] | None:
        form = await request.form()
        params = [(key, str(value)) for key, value in form.multi_items()]
        url = f"{self._public_url}{request.url.path}?{request.url.query}"
        if not is_valid_signature(self._auth_token, url, params, request.headers.get("X-Twilio-Signature", "")):
            return None
        return dict(params)

    async def sendgrid(self, request: Request) -> Response:
        body = await request.body()
        headers = request.headers
        signature = headers.get(sendgrid_signature.SIGNATURE_HEADER, "")
        timestamp = headers.get(sendgrid_signature.TIMESTAMP_HEADER, "")
        if not sendgrid_signature.is_valid_signature(self._sendgrid_key, body, signature, timestamp):
            return PlainTextResponse("bad signature", status_code=403)
        for event in json.loads(body):
            if event.get("event") not in FINAL_EVENTS:
                continue
            ref, status = event.get(REF_ARG, ""), event["event"]
            try:
                if event.get(VARIANT_ARG) == "floor":
                    await self._client.get_workflow_handle(ref).signal(FloorWorkflow.delivered, status)
                else:
                    await self._insert(ref, event.get("sg_message_id"), status)
            except (RPCError, DatabaseError, PoolTimeout):
                return PlainTextResponse("not taken; retry", status_code=503)
        return Response(status_code=200)

    async def _insert(self, intent_id: str, provider_sid: str | None, status: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(INSERT_SQL, (intent_id, "naive", provider_sid, status))

    async def floor(self, request: Request) -> Response:
        fields = await self._verified(request)
        if fields is None:
            return PlainTextResponse("bad signature", status_code=403)
        status = fields.get("MessageStatus", "")
        if status in FINAL_STATUSES:
            try:
                await self._client.get_workflow_handle(request.query_params["wf"]).signal(
                    FloorWorkflow.delivered, status
                )
            except RPCError:
                return PlainTextResponse("not signalled; retry", status_code=503)
        return Response(status_code=200)

    async def naive(self, request: Request) -> Response:
        fields = await self._verified(request)
        if fields is None:
            return PlainTextResponse("bad signature", status_code=403)
        status = fields.get("MessageStatus", "")
        if status in FINAL_STATUSES:
            try:
                await self._insert(request.query_params["id"], fields.get("MessageSid"), status)
            except (DatabaseError, PoolTimeout):
                return PlainTextResponse("not stored; retry", status_code=503)
        return Response(status_code=200)


async def main() -> None:
    env = os.environ
    port = int(env["BENCH_RECEIVER_PORT"])
    async with AsyncConnectionPool(env["DATABASE_URL"], min_size=1, max_size=8, open=False) as pool:
        client = await Client.connect(env["HERALD_TEMPORAL_ADDRESS"], namespace=env["HERALD_TEMPORAL_NAMESPACE"])
        receiver = Receiver(env["HERALD_TWILIO_AUTH_TOKEN"], env["HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY"],
                            f"http://127.0.0.1:{port}", client, pool)  # fmt: skip
        app = Starlette(
            routes=[
                Route("/floor", receiver.floor, methods=["POST"]),
                Route("/naive", receiver.naive, methods=["POST"]),
                Route("/sendgrid", receiver.sendgrid, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    asyncio.run(main())
