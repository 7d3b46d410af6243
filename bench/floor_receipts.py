"""The floor's report path, for comparison with Herald's (`bench.herald_run.run_receipts`).

m floor workflows are parked waiting for their one signal (emulator fault `silent`: accepted,
never reported), then the bench, playing Twilio, posts one signed `delivered` callback per
message to the floor's receiver, which verifies it and signals the workflow; each workflow then
runs its insert activity and completes. Same callbacks, same concurrency as Herald's run.

E-mail (`channel="email"`): floor e-mail workflows parked at the bench's ESP (fault `no_events`),
then one signed SendGrid `delivered` event each to the receiver (`bench.sendgrid_play`).
"""

from __future__ import annotations

from bench.common import BODY_TEMPLATE, fresh_address, fresh_recipient, new_tag, offer
from bench.context import EMAIL_ROLES, Bench
from bench.floor import EMAIL_TASK_QUEUE, TASK_QUEUE, WORKFLOW_NAME, FloorInput
from bench.herald_run import ReceiptsResult, make_room_at_emulator, park_rss, play_twilio, post_reports, provider_holds
from bench.sendgrid_play import delivered_posts


async def run_floor_receipts(bench: Bench, m: int, timeout: float, channel: str = "sms") -> ReceiptsResult:
    result = ReceiptsResult(m)
    client = bench.floor_temporal
    email = channel == "email"
    prefix = f"floor-parked-{new_tag()}-"
    admin = bench.emulators["esp_bench" if email else "emulator"]
    if not email:  # the bench's ESP keeps a whole run's messages
        await make_room_at_emulator(bench, m)
    recipient = fresh_address() if email else fresh_recipient()
    await admin.silence(recipient)

    async def start_one(i: int) -> None:
        await client.start_workflow(
            WORKFLOW_NAME,
            FloorInput(intent_id=f"{prefix}{i}", to=recipient, body=BODY_TEMPLATE.format(n=i)),
            id=f"{prefix}{i}",
            task_queue=EMAIL_TASK_QUEUE if email else TASK_QUEUE,
        )

    await offer(m, None, start_one)

    if not await provider_holds(admin, recipient, m, timeout):
        result.timed_out = True
        return result
    result.rss_after_parking = park_rss(bench, "floor_email_worker" if email else "floor_worker")
    if email:
        posts = delivered_posts(bench, await admin.messages(recipient), f"{bench.stack.receiver_url}/sendgrid")
        first = await post_reports(bench, posts, result, EMAIL_ROLES["floor"], client, prefix, timeout)
    else:
        first = await play_twilio(bench, recipient, result, "floor", client, prefix, timeout)
    # Applied = the workflow ran its insert: the floor's equivalent of Herald's verdict in the ledger.
    async with bench.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*), extract(epoch FROM max(delivered_at))::float8 FROM bench_deliveries WHERE intent_id LIKE %s",
            (prefix + "%",),
        )
        result.applied, last_applied = await cursor.fetchone()
    result.applied_seconds = (last_applied - first) if last_applied else 0.0
    result.states.update({"completed": result.applied})
    return result
