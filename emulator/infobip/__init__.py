"""An Infobip SMS API v3 stand-in with fault injection, for tests and demos only: built to what
Infobip documents (its OpenAPI specification 3.210.0 and official Python client; notes in
/work/wt/infobip_spec.md), not to what suits Herald.

``InfobipServer(InfobipConfig(...))`` runs it on a fixed port that survives a stop and a start;
``python -m emulator.infobip`` runs it as a process. ``emulator.infobip.api`` has the SMS routes,
``emulator.infobip.app`` the admin API, ``emulator.infobip.faults`` what can be injected per number.

Where Infobip's documentation leaves a choice, the emulator makes the documented-closest one:

* Idempotent sending is an account setting, off by default (``idempotency_grace_seconds`` /
  ``--idempotency-grace``). Off, a reused ``messageId`` is simply a second message, sent again: that
  is Infobip's default, and the danger a client must avoid. On, Infobip says a repeat within the
  grace period is "rejected during processing" and sends no copy; the exact answer is undocumented,
  so here the send is answered 200 as any accepted message (PENDING_ACCEPTED), and one step later
  the repeat is REJECTED (status 23 REJECTED_DUPLICATE_MESSAGE_ID, error 5492 EC_DUPLICATE_MESSAGE)
  in its own delivery report and log entry, under the same messageId. The original is untouched.
* A message names no validity: 48 hours. Longer ones are cut to 48 hours, as documented.
* A report goes one way only: pushed when the message (or the account's subscription) names a URL
  and ``notify`` is not false, else kept for ``GET /sms/3/reports``.
* The report-retry schedule is Infobip's, scaled by ``time_factor``: the one stated deviation.
"""
