"""Every `starter.py` command the README shows, run as a new user runs it right after `make run`.

The user exports nothing: the command finds the stack through `.state/stack.env`, which the launcher
writes in the checkout. So each command runs as a process in a checkout of its own (this one's
entry point and packages, copied) whose `.state/stack.env` is the session stack's, written by the
launcher's own function, with no HERALD_* variable and no DATABASE_URL in its environment. The
worker and the receipt server run in this process (the `herald` fixture), as `make run` runs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.__main__ import _write_env_file
from herald.cli.parser import EXAMPLES
from tests.intents import fresh_address, fresh_key, fresh_recipient, receipt_request

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
# Every README command is run here (the demo is the launcher's, `python -m devstack demo`, not starter.py's).
NOT_RUN: set[str] = set()


@dataclass(frozen=True)
class Story:
    """What the commands act on: intents sent before them, recipients of their own, the checkout."""

    checkout: Path
    delivered_key: str  # an intent that reached `delivered`, for status and cancel
    erased_to: str  # the recipient of another delivered intent, for erase
    to: str  # a recipient with nothing yet, for consent and suppression


@dataclass(frozen=True)
class Case:
    """One README command: its arguments (given the story), and a line its output must hold."""

    argv: Callable[[Story], list[str]]
    shows: str


def readme_commands() -> set[str]:
    """The commands the README names after `starter.py`, as EXAMPLES' keys (`send`, `policy publish`)."""
    found: set[str] = set()
    for text in re.findall(r"starter\.py ([^`\n]*)", README.read_text(encoding="utf-8")):
        # Several at once ("send / status / cancel", "send/consent"); a shell comment is no command.
        for part in re.split(r"\s*/\s*", text.partition("#")[0]):
            words = part.split()
            if not words or words[0] == "...":
                continue
            named = {" ".join(words[:2])} & set(EXAMPLES) or {words[0]} & set(EXAMPLES)
            # A group alone ("consent", "suppression") stands for each of its actions.
            named = named or {command for command in EXAMPLES if command.startswith(f"{words[0]} ")}
            assert named, f"README names `starter.py {part}`, which is no command"
            found |= named
    return found


def _files(story: Story, name: str, content: str) -> str:
    path = story.checkout / name
    path.write_text(content, encoding="utf-8")
    return name  # relative: the command runs in the checkout, as the README's examples do


def _notice_file(story: Story) -> str:
    data = {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    notice = {"business_key": fresh_key("seller_new_order"), "channels": [
        {"channel": "sms", "recipient": fresh_recipient(), "template_id": "order_receipt", "template_version": 1,
         "render_data": data},
        {"channel": "email", "recipient": fresh_address(), "template_id": "order_receipt_email",
         "template_version": 1, "render_data": data},
    ]}  # fmt: skip
    return _files(story, "notice.json", json.dumps(notice))


def _template_file(story: Story) -> str:
    return _files(story, "order_receipt_v2.txt", (story.checkout / "herald/templates/order_receipt/v1.txt").read_text())


# Each README command, with the README's own arguments where they fit this stack (fresh keys and
# numbers, so a rerun meets nothing of a former run).
CASES: dict[str, Case] = {
    "send": Case(
        lambda s: ["send", "--key", fresh_key(), "--to", fresh_recipient(), "--template", "order_receipt",
                   "--version", "1", "--data", "order_ref=ord_1", "--data", "amount=42.50", "--data", "currency=EUR",
                   "--data", "merchant=Shop", "--wait"],  # fmt: skip
        "final state: delivered",
    ),
    "send --file": Case(lambda s: ["send", "--file", _notice_file(s)], "(email) started or attached"),
    "status": Case(lambda s: ["status", s.delivered_key], "delivered"),
    "status --channel": Case(lambda s: ["status", s.delivered_key, "--channel", "sms"], "transitions (ledger):"),
    "cancel": Case(
        lambda s: ["cancel", s.delivered_key, "--reason", "seat filled", "--operator", "alice"],
        "not cancelled (delivered)",
    ),
    "report": Case(lambda s: ["report"], "route backlog"),
    "artifact put": Case(lambda s: ["artifact", "put", _files(s, "report.pdf", "%PDF-1.4 a report\n")], '"sha256"'),
    "policy list": Case(lambda s: ["policy", "list"], "v1 "),
    "policy show": Case(lambda s: ["policy", "show", "1"], "v1 effective from"),
    # In force from a time no test reaches: the session's policy stays the one its tests publish.
    "policy publish": Case(
        lambda s: ["policy", "publish", _files(s, "rules.json", "{}"), "--owner", "ops-team", "--note", "quiet hours",
                   "--effective-from", "2999-12-02T08:00:00+00:00"],  # fmt: skip
        "published policy v",
    ),
    "consent grant": Case(
        lambda s: ["consent", "grant", s.to, "marketing", "--source", "signup form, box 3"], "consent recorded"
    ),
    "suppression lift": Case(
        lambda s: ["suppression", "lift", s.to, "--channel", "sms", "--operator", "alice", "--reason", "resubscribed"],
        "suppression lifted at",
    ),
    "suppression list": Case(lambda s: ["suppression", "list", s.to], "now: not suppressed"),
    "template preview": Case(
        lambda s: ["template", "preview", "seller_new_order", "latest", "--data", "order_ref=A-1",
                   "--data", "order_total=EUR 18.00", "--data", "item_count=2"],  # fmt: skip
        "template    seller_new_order",
    ),
    # Into the checkout's own templates: this test's copy, not the repository.
    "template publish": Case(
        lambda s: ["template", "publish", "order_receipt", "2", _template_file(s)], "order_receipt v2 published"
    ),
    "erase": Case(
        lambda s: ["erase", s.erased_to, "--operator", "dpo", "--reason", "erasure request 2026-118"],
        "ledger: erased 1 intent(s)",
    ),
}


def new_user_env() -> dict[str, str]:
    """The shell of someone who has run `make run` and exported nothing of Herald's."""
    return {
        name: value for name, value in os.environ.items() if not name.startswith("HERALD_") and name != "DATABASE_URL"
    }


@pytest.fixture(scope="module")
async def story(stack: Any, herald: Any, tmp_path_factory: pytest.TempPathFactory) -> Story:
    """A checkout as `make run` leaves it (starter.py, its packages, `.state/stack.env`), and two
    intents delivered before the commands run."""
    stack.create_service_database()  # the demo service's outbox, as `make run` makes it (erase reaches it)
    checkout = tmp_path_factory.mktemp("checkout")
    for package in ("herald", "devstack"):
        shutil.copytree(REPO_ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("starter.py", "temporal-dev.yaml"):
        shutil.copy2(REPO_ROOT / name, checkout / name)
    _write_env_file(stack)  # as the launcher writes it, into the session stack's state folder
    (checkout / ".state").mkdir()
    shutil.copy2(stack.config.state_path / "stack.env", checkout / ".state" / "stack.env")
    keys, recipients = [fresh_key(), fresh_key()], [fresh_recipient(), fresh_recipient()]
    for key, to in zip(keys, recipients, strict=True):
        await herald.send(receipt_request(key, to))
    for key in keys:
        assert (await asyncio.wait_for(herald.wait(key), timeout=60)).state.value == "delivered"
    return Story(checkout, delivered_key=keys[0], erased_to=recipients[1], to=fresh_recipient())


async def starter(checkout: Path, *argv: str) -> tuple[int, str, str]:
    """`python starter.py ARGV` in `checkout`, awaited so this process's worker keeps working meanwhile."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "starter.py", *argv, cwd=checkout, env=new_user_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, out.decode(), err.decode()


def test_every_command_the_readme_shows_is_run_here() -> None:
    """The cases below cover each command the README names after `starter.py`."""
    commands = readme_commands()
    assert {"send", "consent grant", "suppression list", "suppression lift"} <= commands
    assert commands - NOT_RUN <= {name.removesuffix(" --file").removesuffix(" --channel") for name in CASES}


# The commands run at once, this many at a time: each is a new process that mostly waits (on its
# import, on Temporal and the ledger), and none reads what another writes (their keys, recipients and
# files are their own; `policy publish` takes effect in 2999). One at a time they took 102 s.
AT_ONCE = 4


@pytest.fixture(scope="module")
async def ran(story: Story) -> dict[str, tuple[int, str, str]]:
    """Every case's exit code, output and error output, the commands run side by side."""
    slots = asyncio.Semaphore(AT_ONCE)

    async def one(case: Case) -> tuple[int, str, str]:
        async with slots:
            return await starter(story.checkout, *case.argv(story))

    results = await asyncio.gather(*(one(case) for case in CASES.values()))
    return dict(zip(CASES, results, strict=True))


@pytest.mark.parametrize("name", list(CASES))
async def test_a_readme_command_works_with_only_the_stacks_env_file(ran: dict[str, tuple[int, str, str]], name: str) -> None:
    """The command exits 0 with its output, nothing on stderr, its settings from `.state/stack.env` alone."""
    code, out, err = ran[name]
    assert (code, err) == (0, ""), err
    assert CASES[name].shows in out, out
