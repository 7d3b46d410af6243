"""`cancel`: close an intent's future work, with the operator and the reason recorded."""

from __future__ import annotations

import argparse

from herald.cli.connections import herald_client
from herald.runtime.process import ProcessRuntime


async def cmd_cancel(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    herald = await herald_client(runtime)
    answer = await herald.cancel(args.key, args.reason, args.operator, args.channel)
    print(f"{'cancelled' if answer.cancelled else 'not cancelled'} ({answer.state.value}): {answer.message}")
    return 0
