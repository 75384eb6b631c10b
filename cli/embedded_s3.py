"""An S3 endpoint on loopback for the demo: moto's server, in this process."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from compactor.cli.context import UsageError

DEMO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "compactor-demo",
    "AWS_SECRET_ACCESS_KEY": "compactor-demo",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def embedded_s3(bucket: str) -> Iterator[str]:
    """Serve S3 on 127.0.0.1 (a free port) with ``bucket`` created; yields the endpoint URL."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise UsageError(
            "the embedded S3 endpoint needs moto[server] (pip install -r requirements.lock), "
            "or pass --store"
        ) from None
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log on the console
    saved = {k: os.environ.get(k) for k in DEMO_CREDENTIALS}
    os.environ.update(DEMO_CREDENTIALS)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
