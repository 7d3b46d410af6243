"""Provider emulators with fault injection, for tests and demos only: a Twilio-compatible SMS
API (this package), an SMTP relay that plays SendGrid (``emulator.esp``) and Infobip's SMS API v3
(``emulator.infobip``).

``create_app(EmulatorConfig(...))`` builds the Starlette app; ``python -m emulator``
runs it under uvicorn. See ``emulator.app`` for the endpoints and
``emulator.faults`` for the faults it can inject per recipient number.
"""
