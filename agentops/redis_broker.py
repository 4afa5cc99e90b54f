"""kombu's Redis transport, made to survive a Redis restart.

With Celery 5.7 / kombu 5.7 a worker exits ("Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")", kombu #2582) when
Redis restarts: closing the dead channel tries to put its unacknowledged messages
back, through a connection that is already gone. Here that restore gives up
quietly instead: the messages stay in Redis's unacked index, and any worker's
periodic `restore_visible` redelivers them once the visibility timeout (sized to
the run lease in settings) has passed, so nothing is lost and the worker
reconnects as it does after any other broker outage.
"""
from __future__ import annotations

import logging

from kombu.transport import redis

log = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client=None):
        try:
            return super().restore_unacked(client)
        except AttributeError as exc:
            if getattr(self.channel.connection, "client", None) is not None:
                raise
            log.warning("broker connection gone while restoring %d unacked message(s) (%s); they are redelivered "
                        "after the visibility timeout", len(self._delivered), exc)
            return None


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
