"""A Twilio-compatible SMS provider emulator with fault injection, for tests and demos only.

``create_app(EmulatorConfig(...))`` builds the Starlette app; ``python -m emulator``
runs it under uvicorn. See ``emulator.app`` for the endpoints and
``emulator.faults`` for the faults it can inject per recipient number.
"""
