"""Jobs an operator runs (cron, a CronJob, a deploy step): migrations, the inbox retention, re-wrapping
recipients' data keys. Each opens what it needs through the process runtime and ends in one line."""
