"""Telemetry settings refuse bad values in one line; the ledger's numbers become the right metric
families; provider calls and finished intents are recorded with the right labels."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from herald.core.routes import Mark
from herald.ledger.provider_marks import ProviderState
from herald.ledger.report import LedgerReport
from herald.metrics.instruments import INTENTS_FINISHED, PROVIDER_LATENCY, ProviderCall, count_finished
from herald.metrics.ledger import IntentCount, LedgerCollector, LedgerNumbers, SubmitOutcomeCount
from herald.metrics.runtime import worker_runtime
from herald.settings import InvalidSetting, TelemetrySettings, load_settings
from herald.temporal.tracing import tracer_provider, tracing_interceptors

# ---- settings ------------------------------------------------------------------------------


def test_telemetry_is_off_and_local_by_default() -> None:
    """Unset, the worker serves no metrics, nothing is traced, and the exporter listens on 127.0.0.1:9465."""
    telemetry = load_settings({}).telemetry
    assert telemetry.worker_metrics_address is None
    assert telemetry.otlp_endpoint is None
    assert (telemetry.metrics_host, telemetry.metrics_port, telemetry.metrics_query_timeout) == ("127.0.0.1", 9465, 5.0)


def test_telemetry_variables_are_read() -> None:
    """Each telemetry variable lands in its setting; Herald's OTLP variable wins over the standard one."""
    telemetry = load_settings(
        {
            "HERALD_WORKER_METRICS_ADDRESS": "0.0.0.0:9464",
            "HERALD_METRICS_HOST": "0.0.0.0",
            "HERALD_METRICS_PORT": "9999",
            "HERALD_METRICS_QUERY_TIMEOUT": "2.5",
            "HERALD_OTLP_ENDPOINT": "http://collector:4317",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4317",
            "OTEL_SERVICE_NAME": "herald-worker-eu",
        }
    ).telemetry
    assert telemetry.worker_metrics_address == "0.0.0.0:9464"
    assert (telemetry.metrics_host, telemetry.metrics_port, telemetry.metrics_query_timeout) == ("0.0.0.0", 9999, 2.5)
    assert telemetry.otlp_endpoint == "http://collector:4317"
    assert telemetry.service_name == "herald-worker-eu"
    standard = load_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example.com:4317"}).telemetry
    assert standard.otlp_endpoint == "https://otel.example.com:4317"


ADDRESS_RULE = "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:9464"
URL_RULE = "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4317"


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("HERALD_WORKER_METRICS_ADDRESS", "9464", ADDRESS_RULE),
        ("HERALD_WORKER_METRICS_ADDRESS", "127.0.0.1:99999", ADDRESS_RULE),
        ("HERALD_METRICS_PORT", "http", "must be a port number from 1 to 65535"),
        ("HERALD_METRICS_QUERY_TIMEOUT", "0", "must be a number of seconds above 0, at most 60"),
        ("HERALD_METRICS_QUERY_TIMEOUT", "600", "must be a number of seconds from 0 to 60"),
        ("HERALD_OTLP_ENDPOINT", "collector:4317", URL_RULE),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x", URL_RULE),
    ],
)
def test_a_bad_telemetry_value_is_refused_in_one_line(name: str, value: str, rule: str) -> None:
    """A telemetry variable Herald cannot use is refused with its name and the rule, nothing else."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({name: value})
    assert str(refused.value) == f"{name}: {rule}"


def test_a_taken_worker_metrics_address_is_refused_in_one_line() -> None:
    """A metrics address another process listens on fails the worker's start naming the variable."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(InvalidSetting) as refused:
            worker_runtime(TelemetrySettings(worker_metrics_address=address))
    message = str(refused.value)
    assert message.startswith(f"HERALD_WORKER_METRICS_ADDRESS: cannot serve metrics on {address} (")
    assert "\n" not in message


# ---- tracing -------------------------------------------------------------------------------


def test_no_tracing_without_an_endpoint() -> None:
    """Without an OTLP endpoint there is no tracer provider and no interceptor."""
    assert tracer_provider(TelemetrySettings(), "herald-worker") is None
    assert tracing_interceptors(None) == []


def test_the_service_name_defaults_per_process_and_follows_otel_service_name() -> None:
    """Traces name the process (herald-worker) unless OTEL_SERVICE_NAME says otherwise."""
    endpoint = "http://127.0.0.1:4317"
    own = tracer_provider(TelemetrySettings(otlp_endpoint=endpoint), "herald-worker")
    named = tracer_provider(TelemetrySettings(otlp_endpoint=endpoint, service_name="eu-1"), "herald-worker")
    assert own is not None and named is not None
    try:
        assert own.resource.attributes["service.name"] == "herald-worker"
        assert named.resource.attributes["service.name"] == "eu-1"
        assert len(tracing_interceptors(own)) == 1
    finally:
        own.shutdown()
        named.shutdown()


# ---- the worker's instruments --------------------------------------------------------------


class _Meter:
    """Records what instruments were created and what they recorded."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, Any, dict[str, str]]] = []

    def create_counter(self, name: str, description: str | None = None, unit: str | None = None) -> Any:
        return _Instrument(self, name)

    def create_histogram_timedelta(self, name: str, description: str | None = None, unit: str | None = None) -> Any:
        return _Instrument(self, name)


class _Instrument:
    def __init__(self, meter: _Meter, name: str) -> None:
        self._meter, self._name = meter, name

    def add(self, value: int, attributes: dict[str, str]) -> None:
        self._meter.recorded.append((self._name, value, attributes))

    def record(self, value: timedelta, attributes: dict[str, str]) -> None:
        self._meter.recorded.append((self._name, value, attributes))


def test_a_finished_intent_is_counted_by_state_and_channel() -> None:
    """count_finished adds one to herald_intents_finished labelled with the final state and channel."""
    meter = _Meter()
    count_finished(meter, "undelivered", "sms")  # type: ignore[arg-type]
    assert meter.recorded == [(INTENTS_FINISHED, 1, {"state": "undelivered", "channel": "sms"})]


def test_a_provider_call_is_timed_with_its_outcome_or_as_an_error() -> None:
    """ProviderCall records the elapsed time with the reported outcome, and `error` when the call raised."""
    meter = _Meter()
    with ProviderCall(meter, "twilio", "submit") as call:  # type: ignore[arg-type]
        call.outcome = "accepted"
    with pytest.raises(TimeoutError), ProviderCall(meter, "smtp", "submit"):  # type: ignore[arg-type]
        raise TimeoutError
    (first_name, first_elapsed, first), (_, _, second) = meter.recorded
    assert first_name == PROVIDER_LATENCY and isinstance(first_elapsed, timedelta)
    assert first == {"provider": "twilio", "operation": "submit", "outcome": "accepted"}
    assert second == {"provider": "smtp", "operation": "submit", "outcome": "error"}


# ---- the ledger's metric families ----------------------------------------------------------


def _report(**overrides: Any) -> LedgerReport:
    fields: dict[str, Any] = {
        "intents": 10, "coverage_pct": 80.0, "delivered_pct": 70.0, "unknown_pct": 10.0, "open_intents": 1,
        "submit_to_accept_p50_ms": 120.0, "submit_to_accept_p95_ms": 400.0,
        "accept_to_terminal_p50_ms": None, "accept_to_terminal_p95_ms": None,
        "polls_per_terminal_message": 0.5, "key_conflicts": 2, "inbox_rows": 14, "inbox_undecided": 3,
        "inbox_oldest_undecided": timedelta(seconds=42), "oldest_unresolved_age": timedelta(minutes=5),
        "duplicates_by_cause": {"twilio/lookup_not_found": 1}, "duplicates_sent": 1,
    }  # fmt: skip
    return LedgerReport(**{**fields, **overrides})


def _scrape(collector: LedgerCollector) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(family: Any, **labels: str) -> float:
    (sample,) = [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return sample.value


def test_the_ledger_numbers_become_metric_families() -> None:
    """Intents by state and channel (zeros included), ratios over finished intents, queue and inbox ages, counters."""
    numbers = LedgerNumbers(
        intents=[
            IntentCount(state="delivered", channel="sms", intents=7),
            IntentCount(state="undelivered", channel="sms", intents=1),
            IntentCount(state="unknown", channel="sms", intents=2),
            IntentCount(state="pending", channel="sms", intents=1),
        ],
        submit_outcomes=[
            SubmitOutcomeCount(channel="sms", outcome="accepted", observations=9),
            SubmitOutcomeCount(channel="sms", outcome="unknown", observations=2),
        ],
        oldest_pending_seconds={"sms": 12.5},
        inbox_awaiting_redelivery=1,
        report=_report(),
    )
    families = _scrape(LedgerCollector(numbers, 0.03))
    assert _value(families["herald_ledger_up"]) == 1
    intents = families["herald_intents"]
    assert _value(intents, state="delivered", channel="sms") == 7
    assert _value(intents, state="expired", channel="email") == 0  # every known pair has a series
    assert _value(families["herald_intents_coverage_ratio"], channel="sms") == pytest.approx(8 / 10)
    assert _value(families["herald_intents_unknown_ratio"], channel="sms") == pytest.approx(2 / 10)
    # No e-mail intent has finished: no ratio rather than a made-up 0 or 1.
    assert [s for s in families["herald_intents_coverage_ratio"].samples if s.labels["channel"] == "email"] == []
    assert _value(families["herald_submit_outcomes"], channel="sms", outcome="unknown") == 2
    assert _value(families["herald_submit_queue_oldest_age_seconds"], channel="sms") == 12.5
    assert _value(families["herald_submit_queue_oldest_age_seconds"], channel="email") == 0
    assert _value(families["herald_inbox_undecided"]) == 3
    assert _value(families["herald_inbox_awaiting_redelivery"]) == 1
    assert _value(families["herald_inbox_oldest_undecided_age_seconds"]) == 42
    assert _value(families["herald_intents_oldest_unresolved_age_seconds"]) == 300
    assert _value(families["herald_submit_to_accept_seconds"], quantile="0.95") == pytest.approx(0.4)
    assert families["herald_accept_to_terminal_seconds"].samples == []
    assert _value(families["herald_duplicates_sent"], cause="twilio/lookup_not_found") == 1


def test_an_unreadable_ledger_is_a_series_not_silence() -> None:
    """When the ledger could not be read the scrape still answers: herald_ledger_up 0 and nothing made up."""
    families = _scrape(LedgerCollector(None, 1.0))
    assert _value(families["herald_ledger_up"]) == 0
    assert set(families) == {"herald_ledger_up", "herald_ledger_scrape_duration_seconds"}


def test_a_provider_skipped_by_routes_is_a_gauge_and_a_report_line() -> None:
    """The route rule's outage state: herald_provider_in_outage 1 (0 once back), how long, and the report's line."""
    since = datetime.now(UTC) - timedelta(seconds=90)
    states = [
        ProviderState(provider="twilio", outage_since=since, probe_due=True, last_mark=Mark.UNREACHABLE,
                      last_mark_at=since + timedelta(seconds=40)),
        ProviderState(provider="infobip", outage_since=None, probe_due=False, last_mark=Mark.ANSWERED,
                      last_mark_at=since),
    ]  # fmt: skip
    report = _report(provider_states=states)
    numbers = LedgerNumbers(intents=[], submit_outcomes=[], oldest_pending_seconds={}, inbox_awaiting_redelivery=0,
                            report=report)  # fmt: skip
    families = _scrape(LedgerCollector(numbers, 0.01))
    assert _value(families["herald_provider_in_outage"], provider="twilio") == 1
    assert _value(families["herald_provider_in_outage"], provider="infobip") == 0
    assert _value(families["herald_provider_outage_seconds"], provider="twilio") == pytest.approx(90, abs=5)
    assert f"providers skipped by routes (in outage)   twilio since {since.isoformat(timespec='seconds')}, probe due" in (
        report.render()
    )
    assert "providers skipped by routes (in outage)   none" in _report().render()
