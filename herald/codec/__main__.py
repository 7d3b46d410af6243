"""`python -m herald.codec`: the codec server for the Web UI and the Temporal CLI."""

from herald.codec.server import main

if __name__ == "__main__":
    main()
