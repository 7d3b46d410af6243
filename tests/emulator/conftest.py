"""The emulator tier's shared servers: the Infobip emulator in-process and the receiver of its reports
(tests/infobip_emulator.py). The Twilio and ESP emulator tests start their own in their files."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from emulator.infobip.config import InfobipConfig
from tests.infobip_emulator import API_KEY, InfobipThread, ReportReceiver

WEBHOOK_USER, WEBHOOK_PASSWORD = "herald-dlr", "dlr-test-password"
# Infobip's retry minutes become 0.12 s: a retry test takes about a second.
TIME_FACTOR = 0.002


def infobip_config(**overrides: object) -> InfobipConfig:
    """A test emulator on a free port, 20 ms steps, scaled retries and Basic-authenticated report posts."""
    settings: dict[str, object] = {
        "port": 0,
        "api_key": API_KEY,
        "step_ms": 20,
        "time_factor": TIME_FACTOR,
        "report_max_retries": 4,
        "webhook_basic_username": WEBHOOK_USER,
        "webhook_basic_password": WEBHOOK_PASSWORD,
    }
    settings.update(overrides)
    return InfobipConfig.model_validate(settings)


@pytest.fixture(scope="session")
def report_receiver() -> Iterator[ReportReceiver]:
    """One receiver for the session; each test posts to names of its own."""
    receiver = ReportReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def infobip() -> Iterator[InfobipThread]:
    """The module's Infobip emulator with the test settings; tests use fresh numbers, never a reset."""
    emulator = InfobipThread(infobip_config()).start()
    yield emulator
    emulator.close()


@pytest.fixture
def start_infobip() -> Iterator[Callable[..., InfobipThread]]:
    """Start an emulator of a test's own settings (`infobip_config` overrides); closed after the test."""
    started: list[InfobipThread] = []

    def start(**overrides: object) -> InfobipThread:
        emulator = InfobipThread(infobip_config(**overrides)).start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.close()
