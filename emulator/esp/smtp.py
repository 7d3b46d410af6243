"""The SMTP side: an aiosmtpd handler that answers as SendGrid's relay does, faults included.

SendGrid's relay (smtp.sendgrid.net, username ``apikey``, password the API
key) is reached over STARTTLS (ports 25, 587, 2525) or implicit TLS (465).
This emulator listens on loopback in plaintext, with no TLS at all, and offers
AUTH PLAIN/LOGIN there when credentials are configured; without credentials
it offers no AUTH and takes mail from anyone who can reach loopback.

Replies:

* ``MAIL`` without AUTH when credentials are configured: ``530``; wrong credentials at ``AUTH``: ``535``;
* a message larger than ``max_message_bytes``: ``552`` (aiosmtpd enforces SIZE, announced in EHLO);
* the store is full: ``452`` at the end of ``DATA`` until a reset;
* accepted: ``250 Ok: queued as <X-Message-Id>``, the id every recipient's ``sg_message_id`` starts with.

Faults are taken per ``RCPT TO``. A fault at ``RCPT`` refuses that recipient only;
a fault at the end of ``DATA`` decides the one reply of the whole transaction,
as SMTP has only one. After a ``421`` the server closes the connection (RFC 5321).
At the end of ``DATA`` the connection faults come first: ``drop_during_data`` hangs
up before anything is stored (nothing accepted, counted with the refusals),
``drop_after_data`` hangs up after storing, ``slow_reply`` stores and answers late.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from emulator.esp.config import EspConfig
from emulator.esp.events import EventPoster
from emulator.esp.faults import DropAfterData, DropDuringData, Fault, FaultRegistry, PermFail, SlowReply, TempFail
from emulator.esp.messages import (
    EspStats,
    MessageRecord,
    MessageStore,
    RecipientRecord,
    new_x_message_id,
    parse_message,
)

log = logging.getLogger(__name__)

HOSTNAME = "esp-emulator.localhost"
_TEMP_REPLIES = {
    421: "421 4.7.0 Message temporarily deferred, closing connection",
    451: "451 4.3.0 Temporary local problem - please try later",
}
_PERM_RCPT_REPLY = "550 5.1.1 Requested action not taken: mailbox unavailable"
_PERM_DATA_REPLY = "554 5.7.1 Transaction failed: message rejected"
_AUTH_REQUIRED_REPLY = "530 5.7.0 Authentication required"
_STORE_FULL_REPLY = "452 4.3.1 Insufficient system storage: POST /_esp/reset"
# drop_after_data, drop_during_data: the closed transport cancels the handler at once; this only bounds the
# wait in case it does not.
_DROP_WAIT_SECONDS = 5.0
# What drop_during_data would say if the cancellation never came; the aborted transport writes nothing.
_LOST_REPLY = "451 4.3.0 Connection dropped before the message was stored"


class EspEnvelope(Envelope):
    """aiosmtpd's envelope plus the fault each accepted recipient drew at ``RCPT``."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: dict[str, Fault | None] = {}


class EspSMTP(SMTP):
    """aiosmtpd's SMTP protocol with envelopes that carry the recipients' faults."""

    def _create_envelope(self) -> EspEnvelope:
        return EspEnvelope()


def _close_after_reply(server: SMTP) -> None:
    """Close the connection once the reply being returned has been written (what 421 announces)."""
    transport = server.transport
    if transport is not None:
        # aiosmtpd writes the hook's reply before it next yields, so this runs after the write;
        # close() still flushes anything buffered.
        server.loop.call_soon(transport.close)


def _peer_ip(session: Session) -> str | None:
    """The SMTP client's IP address, as the socket reported it."""
    peer = session.peer
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return None


class EspHandler:
    """aiosmtpd hooks: AUTH, MAIL, RCPT, DATA; one per emulator instance, shared by its connections."""

    def __init__(
        self, config: EspConfig, store: MessageStore, faults: FaultRegistry, stats: EspStats, poster: EventPoster
    ) -> None:
        self._config = config
        self._store = store
        self._faults = faults
        self._stats = stats
        self._poster = poster
        self._connections: weakref.WeakSet[SMTP] = weakref.WeakSet()

    def protocol_factory(self, loop: asyncio.AbstractEventLoop) -> Callable[[], SMTP]:
        """What ``loop.create_server`` calls for every new connection."""
        config = self._config

        def make() -> SMTP:
            protocol = EspSMTP(
                self,
                data_size_limit=config.max_message_bytes,
                hostname=HOSTNAME,
                ident="herald ESP emulator (SendGrid stand-in, test use only)",
                timeout=config.smtp_idle_timeout_seconds,
                enable_SMTPUTF8=config.smtputf8,
                # Plaintext AUTH is acceptable only because the emulator is loopback test tooling;
                # without credentials, requiring TLS (which it never offers) hides AUTH entirely.
                auth_require_tls=not config.auth_enabled,
                authenticator=self._authenticate if config.auth_enabled else None,
                loop=loop,
            )
            self._connections.add(protocol)
            return protocol

        return make

    def close_connections(self) -> None:
        """Close every open SMTP connection (shutdown); their handlers are cancelled with them."""
        for protocol in list(self._connections):
            if protocol.transport is not None:
                protocol.transport.close()

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert self._config.username is not None and self._config.password is not None
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        # Both comparisons always run, in constant time, so timing says nothing about which part was wrong.
        user_ok = hmac.compare_digest(auth_data.login, self._config.username.encode("utf-8"))
        password_ok = hmac.compare_digest(auth_data.password, self._config.password.encode("utf-8"))
        if user_ok and password_ok:
            return AuthResult(success=True, auth_data=auth_data.login)
        self._stats.auth_failures += 1
        return AuthResult(success=False, handled=False)

    def _refuse(self, code: int, reply: str) -> str:
        self._stats.refuse(code)
        return reply

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        if self._config.auth_enabled and not session.authenticated:
            return self._refuse(530, _AUTH_REQUIRED_REPLY)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        assert isinstance(envelope, EspEnvelope)
        if address in envelope.rcpt_tos:
            # A repeated recipient is delivered once and draws no second fault.
            return "250 OK"
        fault = self._faults.take(address)
        if isinstance(fault, TempFail) and fault.stage == "rcpt":
            if fault.code == 421:
                _close_after_reply(server)
            return self._refuse(fault.code, _TEMP_REPLIES[fault.code])
        if isinstance(fault, PermFail) and fault.stage == "rcpt":
            return self._refuse(550, _PERM_RCPT_REPLY)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        envelope.faults[address] = fault
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope, EspEnvelope)
        faults = [envelope.faults.get(address) for address in envelope.rcpt_tos]
        if any(isinstance(fault, DropDuringData) for fault in faults):
            # Before any other decision: the relay hangs up holding nothing, whatever else was armed.
            self._stats.dropped_during_data += 1
            await self._hang_up(server)
            return _LOST_REPLY
        for fault in faults:
            if isinstance(fault, TempFail) and fault.stage == "data":
                if fault.code == 421:
                    _close_after_reply(server)
                return self._refuse(fault.code, _TEMP_REPLIES[fault.code])
            if isinstance(fault, PermFail) and fault.stage == "data":
                return self._refuse(554, _PERM_DATA_REPLY)
        if len(self._store) >= self._config.max_messages:
            return self._refuse(452, _STORE_FULL_REPLY)

        record = self._accept(envelope, faults, _peer_ip(session))
        reply = f"250 Ok: queued as {record.x_message_id}"
        # The message is stored and its events are under way before any reply trouble, so a client
        # that hears nothing (or gives up waiting) cannot tell whether it was accepted.
        slow = max((fault.seconds for fault in faults if isinstance(fault, SlowReply)), default=0.0)
        if slow:
            self._stats.slow_replies += 1
            await asyncio.sleep(slow)
        if any(isinstance(fault, DropAfterData) for fault in faults):
            self._stats.dropped_connections += 1
            await self._hang_up(server)
        return reply

    @staticmethod
    async def _hang_up(server: SMTP) -> None:
        """Close the connection without a reply, then wait for the cancellation that follows."""
        if server.transport is not None:
            # abort(): nothing written after this point can reach the client.
            server.transport.abort()
        await asyncio.sleep(_DROP_WAIT_SECONDS)

    def _accept(self, envelope: EspEnvelope, faults: list[Fault | None], client_ip: str | None) -> MessageRecord:
        raw = envelope.original_content or b""
        x_message_id = new_x_message_id()
        seq = self._store.next_seq()
        parsed = parse_message(raw, x_message_id, self._config.max_stored_body_chars)
        transaction_fault = next((f.fault for f in faults if isinstance(f, (SlowReply, DropAfterData))), None)
        record = MessageRecord(
            seq=seq,
            x_message_id=x_message_id,
            mail_from=envelope.mail_from or "",
            accepted_at=datetime.now(timezone.utc),
            fault=transaction_fault,
            client_ip=client_ip,
            parsed=parsed,
            recipients=[
                RecipientRecord(
                    email=address,
                    # SendGrid's shape: the X-Message-Id, then a per-recipient filter suffix.
                    sg_message_id=f"{x_message_id}.recvd-esp-emulator-{seq}-{index}.0",
                    fault=fault.fault if fault is not None else None,
                )
                for index, (address, fault) in enumerate(zip(envelope.rcpt_tos, faults))
            ],
        )
        self._store.add(record)
        self._stats.accepted_messages += 1
        self._stats.accepted_recipients += len(record.recipients)
        self._stats.accepted_by_message_id[parsed.message_id] += 1
        for recipient, fault in zip(record.recipients, faults):
            self._poster.launch(record, recipient, fault)
        log.debug("accepted %s for %d recipient(s)", x_message_id, len(record.recipients))
        return record
