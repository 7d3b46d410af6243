"""The codec server: Temporal's remote codec protocol over the payload codec, so the Web UI and
`temporal workflow show` can read what Herald encrypted (``python -m herald.codec``)."""
