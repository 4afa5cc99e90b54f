"""kombu's Redis transport, made to survive a Redis restart.

With Celery 5.7 / kombu 5.7 a worker exits ("Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")", kombu #2582, or
"... no attribute 'client'") when Redis restarts: closing the dead channel tries to
put its unacknowledged messages back, and a task finishing meanwhile acks, through
a connection that is already gone. Here those give up quietly instead: the
messages stay in Redis's unacked index, and any worker's
periodic `restore_visible` redelivers them once the visibility timeout (sized to
the run lease in settings) has passed, so nothing is lost and the worker
reconnects as it does after any other broker outage.
"""
from __future__ import annotations

import logging

from kombu.transport import redis

log = logging.getLogger(__name__)


def _connection_gone(qos) -> bool:
    connection = getattr(qos.channel, "connection", None)
    return connection is None or getattr(connection, "client", None) is None


class QoS(redis.QoS):
    """Acks, rejects and restores on a channel whose connection died are given up, not fatal.

    The message stays in Redis's unacked index; `restore_visible` puts it back in the
    queue after the visibility timeout. A task redelivered that way is harmless: the
    run's lease lets only one worker advance it.
    """

    def _guarded(self, what: str, call, *args):
        try:
            return call(*args)
        except AttributeError as exc:
            if not _connection_gone(self):
                raise
            log.warning("broker connection gone during %s (%s); the message is redelivered after the "
                        "visibility timeout", what, exc)
            return None

    def restore_unacked(self, client=None):
        return self._guarded("restore of unacked messages", super().restore_unacked, client)

    def ack(self, delivery_tag):
        return self._guarded("ack", super().ack, delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        return self._guarded("reject", super().reject, delivery_tag, requeue)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
