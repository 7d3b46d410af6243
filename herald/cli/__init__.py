"""Herald's command line: one module per command group, the argument tree, and main.

    main ........... parse, open the process runtime (herald.runtime), run, one line per failure
    parser ......... every command, action, option and example (``--help``)
    send, status, cancel, report, artifact, template, policy, consent, suppression, erase
                     each command group, reading the ledger through its typed queries (herald.ledger)
    connections .... the client a command sends, reads or cancels with

No SQL, no environment read and no dev tooling here (``tests/unit/test_thin_edge.py``): the
settings module reads the environment, the ledger's functions hold the statements, and the local
launcher's demo is ``python -m devstack demo``. ``starter.py`` at the top is the entry point.
"""
