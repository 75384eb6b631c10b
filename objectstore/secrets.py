"""The AWS credentials a process takes from its environment, and text with them masked.

No line the system prints holds a credential: an error that quotes a request or a URL
(a queue URL given with a secret in it, say) is masked before it is printed, by the event
log (``jobqueue.events``) and by a command's last line (``cli.main``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
MASK = "***"
_SHORTEST = 16
"""Shorter values are not masked. AWS's key ids are 20 characters and its secrets 40;
shorter ones are a development setup's placeholders (LocalStack's and moto's ``test``,
MinIO's ``minioadmin``), and masking them would cut them out of every topic name and
path that holds them (``unknown topic 'la***-***s'``)."""


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The credentials' values in ``environ`` (the process's by default), longest first,
    so that a value holding another is masked whole."""
    env = os.environ if environ is None else environ
    values = {env.get(name, "") for name in SECRET_ENV}
    return sorted((v for v in values if len(v) >= _SHORTEST), key=len, reverse=True)


def masked(text: str, secrets: Sequence[str] | None = None) -> str:
    """``text`` with every value of ``secrets`` (the environment's by default) replaced by
    ``MASK``."""
    for secret in environment_secrets() if secrets is None else secrets:
        text = text.replace(secret, MASK)
    return text
