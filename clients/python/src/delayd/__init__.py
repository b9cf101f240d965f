"""Python client for delayd, the durable delayed-message service.

    import delayd

    with delayd.Client("http://127.0.0.1:7070") as client:
        emails = client.queue("emails")
        emails.enqueue('{"to": "a@example.com"}', delay=3600, id="welcome-42")
        for msg in emails.consume(max=100, wait=20):
            send(msg.json())          # acked when the loop moves on

# Layout
- ``aio``: :class:`AsyncClient` and :class:`AsyncQueue`; ``client``: the
  same, sync, as :class:`Client` and :class:`Queue` (generated from ``aio``
  by ``tools/gen_sync.py``).
- ``_ops``: request builders both share (and :data:`UNSET`, the default
  of an argument where ``None`` means something); ``_transport``: errors and retries;
  ``routes``: every API operation with the fields the client sends (checked
  against the server's OpenAPI document by the tests).
- ``models``: wire types (dataclasses); ``errors``: one exception per code.
- ``worker`` / ``aio_worker``: ``consume()`` and ``work()`` with lease
  extension, ack/nack, deferral (:class:`Defer`) and graceful stop.
- ``push``: ``delayd-signature`` verification for push receivers.
"""

from ._ops import UNSET, AckItem, EnqueueItem, PushConfig, Unset
from ._transport import NO_RETRY, RetryPolicy, __version__
from .aio import AsyncClient, AsyncQueue
from .aio_worker import AsyncConsumer, AsyncDelivery
from .client import Client, Queue
from .errors import (
    DelaydError,
    Forbidden,
    InsufficientStorage,
    InvalidArgument,
    InvalidJson,
    InvalidState,
    LeaseMismatch,
    MessageNotFound,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QueueNotFound,
    ScheduleNotFound,
    TransportError,
    Unauthorized,
    Unavailable,
)
from .models import (
    AckResult,
    EnqueueResult,
    Event,
    EventType,
    Flow,
    Histogram,
    History,
    KeyInfo,
    Leased,
    LeasedMessage,
    Message,
    MessageState,
    OnConflict,
    Push,
    QueueConfig,
    QueueInfo,
    QueueStats,
    Rate,
    Retry,
    Schedule,
    ScheduleMessage,
)
from .push import PushDelivery, SignatureError, verify
from .worker import Consumer, Defer, Delivery

__all__ = [
    "AckItem",
    "AckResult",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncDelivery",
    "AsyncQueue",
    "Client",
    "Consumer",
    "DelaydError",
    "Defer",
    "Delivery",
    "EnqueueItem",
    "EnqueueResult",
    "Event",
    "EventType",
    "Flow",
    "Forbidden",
    "Histogram",
    "History",
    "InsufficientStorage",
    "InvalidArgument",
    "InvalidJson",
    "InvalidState",
    "KeyInfo",
    "LeaseMismatch",
    "Leased",
    "LeasedMessage",
    "Message",
    "MessageNotFound",
    "MessageState",
    "MethodNotAllowed",
    "NO_RETRY",
    "NotFound",
    "OnConflict",
    "PayloadTooLarge",
    "Push",
    "PushConfig",
    "PushDelivery",
    "Queue",
    "QueueConfig",
    "QueueInfo",
    "QueueNotFound",
    "QueueStats",
    "Rate",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "ScheduleMessage",
    "ScheduleNotFound",
    "SignatureError",
    "TransportError",
    "UNSET",
    "Unauthorized",
    "Unavailable",
    "Unset",
    "__version__",
    "verify",
]
