"""`artifact put`: store a file as an immutable attachment, by content, in the ledger's database."""

from __future__ import annotations

import argparse
import mimetypes
from pathlib import Path

from herald import cli_input
from herald.artifacts import MAX_ARTIFACT_BYTES, ArtifactRefused, PostgresArtifactStore, artifact_ref
from herald.cli_input import CliInputError
from herald.runtime.process import LEDGER, ProcessRuntime

# The field names of ArtifactRefused, as the caller of `artifact put` spells them.
_ARTIFACT_PUT_ARGUMENTS = {"content": "FILE", "media_type": "--media-type", "filename": "--filename"}


async def cmd_artifact_put(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    path = Path(args.file)
    content = cli_input.read_bytes(args.file, "FILE", max_bytes=MAX_ARTIFACT_BYTES)
    guessed, encoding = mimetypes.guess_type(path.name)
    # A compressed file (report.csv.gz) is guessed as what it contains; its bytes are not that type.
    if args.media_type is not None:
        media_type = args.media_type
    else:
        media_type = guessed if guessed and encoding is None else "application/octet-stream"
    filename = args.filename if args.filename is not None else path.name
    try:
        artifact_ref(content, media_type=media_type, filename=filename)
    except ArtifactRefused as refused:
        raise CliInputError(_ARTIFACT_PUT_ARGUMENTS[refused.field], refused.rule) from None
    rule = "required to store an artifact (artifacts live in the ledger's database)"
    async with runtime.pool(LEDGER, rule) as pool:
        ref = await PostgresArtifactStore(pool).put(content, media_type=media_type, filename=filename)
    print(ref.model_dump_json())
    return 0
