"""The process runtime: what every server, job and command opens from the settings, and how it exits.

``ProcessRuntime`` (``process``) opens, each once and only when asked, the fingerprint keyring, the
key-encryption keys, the recipient vault, a database reached before its pool, a Temporal client and
the payload codec; ``reach`` checks a dependency once at start (``ServiceUnreachable`` names the
variable); ``exits`` turns a failure into one line and an exit code.
"""
