"""Job documents on a queue, by hand: peek at them (``replay --from-queue``) or run them
(``--execute``: how an operator drains a dead-letter queue).

A peek receives each message with a short visibility, so the next receive moves on to
another, and makes every one visible again when done: the queue is as it was but for
the messages' receive counts (which a redrive policy counts too). A drain hands each
message to a ``QueueWorker``, which deletes it once its job committed or proved stale;
a message that is not a job document, or whose job failed, stays in the queue.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from compactor.jobqueue.consumer import QueueWorker
from compactor.jobqueue.sqs import JobQueue, Message

PEEK_VISIBILITY_S = 60
"""How long a peeked message stays invisible if the peek dies before releasing it."""
RECEIVE_WAIT_S = 2
"""How long a receive waits before the queue counts as drained."""


def peek(queue: JobQueue, limit: int | None) -> list[Message]:
    """Up to ``limit`` messages (all that come), received and then released at once."""
    messages: list[Message] = []
    try:
        for message in _received(queue, limit, PEEK_VISIBILITY_S):
            messages.append(message)
    finally:
        for message in messages:
            with contextlib.suppress(Exception):  # it reappears after its timeout anyway
                queue.release(message)
    return messages


def drain(worker: QueueWorker, limit: int | None) -> list[tuple[Message, str]]:
    """Runs up to ``limit`` messages' jobs (all that come); each with its outcome. Poison
    messages are made visible again at the end (a failed job's message reappears after
    its visibility timeout, as for any worker)."""
    done: list[tuple[Message, str]] = []
    poison: list[Message] = []
    try:
        for message in _received(worker.queue, limit, worker.settings.visibility_timeout_s):
            outcome = worker.handle(message)
            done.append((message, outcome))
            if outcome == "poison":
                poison.append(message)
    finally:
        for message in poison:
            with contextlib.suppress(Exception):
                worker.queue.release(message)
    return done


def _received(queue: JobQueue, limit: int | None, visibility_s: int) -> Iterator[Message]:
    seen: set[str] = set()
    while limit is None or len(seen) < limit:
        message = queue.receive(RECEIVE_WAIT_S, visibility_s)
        if message is None or message.message_id in seen:
            if message is not None:
                with contextlib.suppress(Exception):
                    queue.release(message)
            return
        seen.add(message.message_id)
        yield message
