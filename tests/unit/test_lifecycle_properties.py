"""Property tests of the lifecycle over random observation sequences, through a small pure driver.

The driver keeps the workflow's bookkeeping without Temporal: the intent state and, for each
attempt, what ``AttemptView`` carries (provider id, provider status, submit answer, whether a
final failure's code is retryable). It judges every provider fact with
``herald.core.evidence.observe_across`` over all attempts, applies the attempt status when the verdict
is applied, and moves the intent (through ``check_transition``) to the verdict's state; submit
refusals and lookups settle the intent with ``next_state``, and a retry timer sends the next
attempt only when ``may_dispatch`` allows it. Evidence about any attempt may settle the intent.

The invariants checked: a terminal state never changes; every observation gets exactly one
verdict, with a reason; an unapplied verdict moves nothing; attempt statuses never lose rank, a
final one is never replaced, an attempt never changes provider id; every transition is declared;
attempts stay within the budget; retry and poll delays stay within their caps; for one attempt,
the outcome is the first final fact's and does not depend on the order of agreeing facts.

Dropped: "only the current attempt moves the intent". It held only under the earlier rule set;
today a report about an earlier attempt (delivered, or live while the latest is unknown) settles
the intent, and an intent is never closed as a failure while an earlier attempt may still arrive.
Its replacement here: a move caused by an earlier attempt says so in its reason. That the state
is the best evidence across attempts, and that no attempt is dispatched after evidence of
acceptance, is property-tested against an oracle in ``test_evidence.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from herald.core.delivery_policy import DeliveryPolicy, may_retry, poll_delay, retry_delay
from herald.core.evidence import may_dispatch, next_state, observe_across
from herald.core.lifecycle import (
    ALLOWED_TRANSITIONS,
    AttemptView,
    IntentState,
    Observation,
    Source,
    SubmitResult,
    Verdict,
    check_transition,
    intent_state_for,
)
from herald.core.outcomes import ProviderStatus
from herald.providers.twilio_codes import is_retryable
from tests.depth import examples

S = IntentState
P = ProviderStatus
R = SubmitResult
AT = datetime(2025, 1, 1, tzinfo=timezone.utc)
RETRYABLE_CODE = 30001
PERMANENT_CODE = 30003
TICK = timedelta(microseconds=1)
FINAL_STATUSES = [status for status in P if status.is_final]
OBSERVED_STATUSES = [P.QUEUED, P.SENT, P.DELIVERED, P.UNDELIVERED, P.FAILED]
CODES = st.sampled_from([None, RETRYABLE_CODE, PERMANENT_CODE])
SOURCES = st.sampled_from([Source.REPORT, Source.POLL, Source.SUBMIT])
PROPERTY = settings(derandomize=True, database=None, max_examples=examples(400), deadline=None)


def provider_id_of(number: int) -> str:
    return f"SM{number:032d}"


@dataclass
class Attempt:
    number: int
    provider_id: str | None = None
    status: ProviderStatus | None = None
    submit_result: SubmitResult | None = None
    failure_retryable: bool = False
    retry_hint: timedelta | None = None
    polls: int = 0

    def view(self) -> AttemptView:
        return AttemptView(
            number=self.number,
            provider_id=self.provider_id,
            provider_status=self.status,
            submit_result=self.submit_result,
            failure_retryable=self.failure_retryable,
        )


@dataclass
class Driver:
    """The workflow's bookkeeping around ``observe_across``, ``next_state`` and ``may_dispatch``, without Temporal."""

    policy: DeliveryPolicy
    state: IntentState = S.PENDING
    attempts: list[Attempt] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    fed: int = 0
    transitions: list[tuple[IntentState, IntentState]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dispatch()

    @property
    def current(self) -> Attempt:
        return self.attempts[-1]

    def views(self) -> list[AttemptView]:
        return [attempt.view() for attempt in self.attempts]

    def transition(self, target: IntentState) -> None:
        check_transition(self.state, target)  # raises on an undeclared move: the property then fails
        self.transitions.append((self.state, target))
        self.state = target

    def settle(self) -> None:
        target = next_state(self.state, self.views())
        if target is not self.state:
            self.transition(target)

    def dispatch(self) -> None:
        assert self.state is S.PENDING
        if not may_dispatch(self.views()):
            self.settle()  # the workflow settles instead of sending; unreachable while every path settles first
            return
        self.attempts.append(Attempt(len(self.attempts) + 1))
        self.transition(S.SUBMITTING)

    def feed(self, observation: Observation) -> Verdict:
        self.fed += 1
        number = observation.attempt_number
        if not 1 <= number <= len(self.attempts):
            verdict = Verdict(
                applied=False,
                reason="names an attempt this intent never made",
                attempt_status=None,
                intent_state=self.state,
            )
            self.verdicts.append(verdict)
            return verdict
        attempt = self.attempts[number - 1]
        retryable = is_retryable(observation.error_code)
        verdict = observe_across(self.state, self.views(), observation, retryable_code=retryable)
        self.verdicts.append(verdict)
        if verdict.applied:
            attempt.provider_id = observation.provider_id
            attempt.status = verdict.attempt_status
            if observation.status.is_final:
                attempt.failure_retryable = retryable and observation.status is not P.DELIVERED
        if verdict.intent_state is not self.state:
            self.transition(verdict.intent_state)
        return verdict

    def submit_accepted(self, status: ProviderStatus, code: int | None) -> Verdict:
        self.current.submit_result = R.ACCEPTED
        return self.feed(
            Observation(
                attempt_number=self.current.number,
                provider_id=provider_id_of(self.current.number),
                status=status,
                error_code=code,
                source=Source.SUBMIT,
                observed_at=AT,
            )
        )

    def submit_answered(self, result: SubmitResult, hint: timedelta | None = None) -> None:
        """A submit answer without a provider status (refused, rejected, unknown): the intent settles on it."""
        self.current.submit_result = result
        if result is R.RETRYABLE:
            self.current.retry_hint = hint
        self.settle()

    def not_found_proven(self) -> None:
        """A lookup proved the current attempt, whose submit was unknown, never accepted."""
        if self.current.submit_result is R.UNKNOWN and self.current.status is None:
            self.current.submit_result = R.NOT_ACCEPTED
            self.settle()

    def retry_timer(self, jitter: float) -> timedelta | None:
        """The retry wait: give up when the budget is spent, else back off and send the next attempt."""
        if self.state is not S.RETRYABLE_FAILURE:
            return None
        if not may_retry(self.policy, len(self.attempts)):
            self.transition(S.PERMANENT_FAILURE)
            return None
        delay = retry_delay(self.policy, len(self.attempts), self.current.retry_hint, jitter)
        self.transition(S.PENDING)
        self.dispatch()
        return delay

    def close(self, target: IntentState) -> None:
        if target in ALLOWED_TRANSITIONS[self.state]:
            self.transition(target)


@dataclass
class Watch:
    """What an observer outside the driver remembers between steps, to check the step invariants."""

    terminal: IntentState | None = None
    statuses: dict[int, ProviderStatus] = field(default_factory=dict)
    provider_ids: dict[int, str] = field(default_factory=dict)

    def check(self, driver: Driver) -> None:
        if self.terminal is not None:
            assert driver.state is self.terminal, f"terminal {self.terminal.value} moved to {driver.state.value}"
        elif driver.state.is_terminal:
            self.terminal = driver.state
        assert driver.fed == len(driver.verdicts)
        assert len(driver.attempts) <= driver.policy.max_attempts
        for attempt in driver.attempts:
            before = self.statuses.get(attempt.number)
            if before is not None:
                assert attempt.status is not None and attempt.status.rank >= before.rank
                if before.is_final:
                    assert attempt.status is before, "a final attempt status was replaced"
            if attempt.status is not None:
                self.statuses[attempt.number] = attempt.status
            known_id = self.provider_ids.get(attempt.number)
            if known_id is not None:
                assert attempt.provider_id == known_id, "an attempt changed provider id"
            if attempt.provider_id is not None:
                self.provider_ids[attempt.number] = attempt.provider_id
        assert all(verdict.reason for verdict in driver.verdicts), "a verdict without a reason cannot be audited"


def observations(
    attempts: int = 3, *, own_id_only: bool = False, sources: st.SearchStrategy[Source] = SOURCES
) -> st.SearchStrategy[Observation]:
    number = st.integers(min_value=1, max_value=attempts)
    return number.flatmap(
        lambda n: st.builds(
            Observation,
            attempt_number=st.just(n),
            provider_id=st.just(provider_id_of(n)) if own_id_only else st.sampled_from([provider_id_of(n), "SMother"]),
            status=st.sampled_from(OBSERVED_STATUSES),
            error_code=CODES,
            source=sources,
            observed_at=st.just(AT),
        )
    )


def feed_and_check(driver: Driver, observation: Observation) -> Verdict:
    """Feed one fact and check the per-fact rules: only an applied fact moves an open intent, and a
    move caused by an earlier attempt says so."""
    state_before, latest_before = driver.state, driver.current.number
    known = [attempt.view() for attempt in driver.attempts]
    verdict = driver.feed(observation)
    moved = driver.state is not state_before
    if moved:
        assert verdict.applied, "an unapplied verdict moved the intent"
        assert not state_before.is_terminal
        assert driver.state is not S.PENDING, "an observation sent the intent back to pending"
        if observation.attempt_number != latest_before:
            assert f"evidence about attempt {observation.attempt_number} settles the intent" in verdict.reason
    if not verdict.applied:
        assert [attempt.view() for attempt in driver.attempts] == known, "an unapplied verdict changed an attempt"
        if 1 <= observation.attempt_number <= len(driver.attempts):
            assert verdict.attempt_status is driver.attempts[observation.attempt_number - 1].status
    return verdict


# ---- random sequences ---------------------------------------------------------------------------

# Non-observation events: the retry timer firing, and the current attempt's submit ending
# in a definite retryable refusal, or in an unknown outcome a lookup later proves not accepted.
CLOCK_EVENTS = st.sampled_from(["retry_timer", "submit_retryable", "submit_unknown_not_found"])


@PROPERTY
@given(
    max_attempts=st.integers(min_value=1, max_value=3),
    events=st.lists(st.one_of(observations(3), CLOCK_EVENTS), max_size=25),
)
def test_random_sequences_keep_the_lifecycle_invariants(max_attempts: int, events: list[Observation | str]) -> None:
    """Over any sequence of observations, submit refusals and retry timers: a terminal state never changes, only an applied fact moves the intent, every observation gets exactly one verdict, attempt statuses never lose rank, and every transition is declared."""
    driver = Driver(DeliveryPolicy(max_attempts=max_attempts))
    watch = Watch()
    watch.check(driver)
    fed = 0
    for event in events:
        if isinstance(event, Observation):
            feed_and_check(driver, event)
            fed += 1
        elif event == "retry_timer":
            driver.retry_timer(0.5)
        elif driver.current.submit_result is None:
            if event == "submit_retryable":
                driver.submit_answered(R.RETRYABLE)
            else:
                driver.submit_answered(R.UNKNOWN)
                driver.not_found_proven()
        watch.check(driver)
    assert driver.fed == fed == len(driver.verdicts)


# ---- order of the facts about one attempt -------------------------------------------------------


def final_state(facts: list[Observation]) -> IntentState:
    driver = Driver(DeliveryPolicy(max_attempts=1))
    for fact in facts:
        driver.feed(fact)
    return driver.state


def outcome_of(fact: Observation) -> IntentState:
    return intent_state_for(fact.status, is_retryable(fact.error_code))


ONE_ATTEMPT_FACTS = st.lists(observations(1, own_id_only=True), min_size=1, max_size=6).filter(
    lambda facts: any(fact.status.is_final for fact in facts)
)


# Order-independence holds only while the provider agrees with itself: for contradictory finals
# (delivered, then undelivered) the first one wins by design, terminal states absorb, and the
# contradiction stays visible in the conflicting_terminal_observations view. The two tests below
# pin both halves of that rule.


def one_attempt_fact(status: ProviderStatus, code: int | None) -> st.SearchStrategy[Observation]:
    return st.builds(
        Observation,
        attempt_number=st.just(1),
        provider_id=st.just(provider_id_of(1)),
        status=st.just(status),
        error_code=st.just(code),
        source=SOURCES,
        observed_at=st.just(AT),
    )


# Final (status, code) pairs grouped by the intent state each one leads to.
AGREEING_FINALS: dict[IntentState, list[tuple[ProviderStatus, int | None]]] = {}
for _status in (P.DELIVERED, P.UNDELIVERED, P.FAILED):
    for _code in (None, RETRYABLE_CODE, PERMANENT_CODE):
        AGREEING_FINALS.setdefault(intent_state_for(_status, is_retryable(_code)), []).append((_status, _code))


@st.composite
def agreeing_facts(draw: st.DrawFn) -> list[Observation]:
    """Facts about one attempt whose final observations all lead to the same intent state."""
    outcome = draw(st.sampled_from(sorted(AGREEING_FINALS, key=lambda state: state.value)))
    finals = draw(
        st.lists(
            st.sampled_from(AGREEING_FINALS[outcome]).flatmap(lambda pair: one_attempt_fact(*pair)), min_size=1, max_size=3
        )
    )
    progress = draw(
        st.lists(
            st.tuples(st.sampled_from([P.QUEUED, P.SENT]), CODES).flatmap(lambda pair: one_attempt_fact(*pair)),
            max_size=3,
        )
    )
    return finals + progress


@PROPERTY
@given(data=st.data(), facts=agreeing_facts())
def test_terminal_outcome_is_independent_of_order_when_final_facts_agree(
    data: st.DataObject, facts: list[Observation]
) -> None:
    """When every final observation of one attempt maps to the same intent state, every order of the facts ends in that state."""
    reordered = data.draw(st.permutations(facts), label="reordered")
    expected = outcome_of(facts[0])
    assert expected.is_terminal or expected is S.RETRYABLE_FAILURE
    assert final_state(facts) is expected
    assert final_state(reordered) is expected


@PROPERTY
@given(facts=ONE_ATTEMPT_FACTS)
def test_first_final_fact_decides_the_outcome(facts: list[Observation]) -> None:
    """For one attempt, the intent ends in the state of the first final observation fed; every later final is recorded, not applied."""
    driver = Driver(DeliveryPolicy(max_attempts=1))
    verdicts = [driver.feed(fact) for fact in facts]
    first = next(i for i, fact in enumerate(facts) if fact.status.is_final)
    assert driver.state is outcome_of(facts[first])
    assert verdicts[first].applied
    assert not any(verdict.applied for verdict in verdicts[first + 1 :])


# ---- a stateful model of one intent ---------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn) -> DeliveryPolicy:
    initial = draw(st.floats(min_value=0.1, max_value=60, allow_nan=False))
    backoff_max = draw(st.floats(min_value=initial, max_value=3600, allow_nan=False))
    return DeliveryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=5)),
        backoff_initial=timedelta(seconds=initial),
        backoff_multiplier=draw(st.floats(min_value=1.0, max_value=3.0, allow_nan=False)),
        backoff_max=timedelta(seconds=backoff_max),
        retry_after_cap=timedelta(seconds=draw(st.floats(min_value=backoff_max, max_value=7200, allow_nan=False))),
        poll_initial=timedelta(seconds=draw(st.floats(min_value=1, max_value=60, allow_nan=False))),
        poll_max=timedelta(seconds=draw(st.floats(min_value=60, max_value=3600, allow_nan=False))),
    )


class IntentMachine(RuleBasedStateMachine):
    """One intent driven by submit outcomes, reports, polls, lookups, retry timers, cancels and expiry."""

    def __init__(self) -> None:
        super().__init__()
        self.driver: Driver | None = None
        self.watch = Watch()
        self.retry_delays: list[timedelta] = []
        self.poll_delays: list[timedelta] = []

    @initialize(policy=policies())
    def start(self, policy: DeliveryPolicy) -> None:
        self.driver = Driver(policy)

    @property
    def d(self) -> Driver:
        assert self.driver is not None
        return self.driver

    def _unsubmitted(self) -> bool:
        return self.driver is not None and self.d.current.submit_result is None

    @precondition(lambda self: self._unsubmitted())
    @rule(status=st.sampled_from([P.QUEUED, P.SENT]), code=CODES)
    def submit_accepted(self, status: ProviderStatus, code: int | None) -> None:
        self.d.submit_accepted(status, code)

    @precondition(lambda self: self._unsubmitted())
    @rule(hint=st.none() | st.floats(min_value=0, max_value=30 * 86400, allow_nan=False))
    def submit_retryable(self, hint: float | None) -> None:
        self.d.submit_answered(R.RETRYABLE, None if hint is None else timedelta(seconds=hint))

    @precondition(lambda self: self._unsubmitted())
    @rule()
    def submit_rejected(self) -> None:
        self.d.submit_answered(R.REJECTED)

    @precondition(lambda self: self._unsubmitted())
    @rule()
    def submit_unknown(self) -> None:
        self.d.submit_answered(R.UNKNOWN)

    @precondition(
        lambda self: (
            self.driver is not None
            and self.d.current.submit_result is R.UNKNOWN
            and self.d.current.status is None
            and not self.d.state.is_terminal
        )
    )
    @rule()
    def lookup_proves_not_accepted(self) -> None:
        self.d.not_found_proven()

    @precondition(lambda self: self.driver is not None)
    @rule(observation=observations(3, sources=st.sampled_from([Source.REPORT, Source.POLL])))
    def provider_fact(self, observation: Observation) -> None:
        feed_and_check(self.d, observation)

    @precondition(lambda self: self.driver is not None and self.d.state is S.ACCEPTED)
    @rule(jitter=st.floats(0.0, 1.0))
    def poll_timer(self, jitter: float) -> None:
        attempt = self.d.current
        self.poll_delays.append(poll_delay(self.d.policy, attempt.polls, jitter))
        attempt.polls += 1

    @precondition(lambda self: self.driver is not None and self.d.state is S.RETRYABLE_FAILURE)
    @rule(jitter=st.floats(0.0, 1.0))
    def retry_timer(self, jitter: float) -> None:
        attempts_before = len(self.d.attempts)
        delay = self.d.retry_timer(jitter)
        if delay is None:
            assert self.d.state is S.PERMANENT_FAILURE
            assert attempts_before == self.d.policy.max_attempts
        else:
            self.retry_delays.append(delay)
            assert len(self.d.attempts) == attempts_before + 1
            assert self.d.state is S.SUBMITTING

    # A closing clock fires in three draws of ten, so most runs live long enough to retry.
    @precondition(lambda self: self.driver is not None)
    @rule(closer=st.sampled_from([S.CANCELLED, S.EXPIRED, S.UNKNOWN, None, None, None, None, None, None, None]))
    def closing_clock(self, closer: IntentState | None) -> None:
        if closer is not None:
            self.d.close(closer)

    @invariant()
    def lifecycle_invariants(self) -> None:
        """Terminal absorbs, one verdict per fact, attempts within budget, ranks and ids never regress."""
        if self.driver is not None:
            self.watch.check(self.driver)

    @invariant()
    def delays_within_caps(self) -> None:
        """Every retry delay is within [backoff_initial/2, max(backoff_max, retry_after_cap)] and every poll within ±10 % of its caps."""
        if self.driver is None:
            return
        policy = self.d.policy
        for delay in self.retry_delays:
            assert policy.backoff_initial / 2 - TICK <= delay <= max(policy.backoff_max, policy.retry_after_cap) + TICK
        for delay in self.poll_delays:
            assert policy.poll_initial * 0.9 - TICK <= delay <= policy.poll_max * 1.1 + TICK


IntentMachine.TestCase.settings = settings(
    derandomize=True, database=None, max_examples=examples(200), stateful_step_count=30, deadline=None
)
TestIntentMachine = IntentMachine.TestCase
TestIntentMachine.__doc__ = "Random interleavings of submit outcomes, provider facts, polls, retries and closing clocks keep every lifecycle invariant."
