"""Herald's command line: its commands, their parser and how a failure becomes one line (``commands``).

``python starter.py`` is its entry point; the parsing of typed arguments (``herald.cli_input``) and
the connections of one command (``herald.cli_services``) are shared with the other entry points.
"""
