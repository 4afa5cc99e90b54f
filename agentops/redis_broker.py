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

It also takes a burst of queued tasks in one round trip. kombu takes one message per
`BRPOP` and records each as unacknowledged with a `MULTI ... EXEC` of its own: two
round trips per message on the consumer thread, each a wait for the GIL behind every
busy pool thread, so 64 runs queued at once began over 250 ms. After a `BRPOP` finds a
message, one script here pops up to as many more as the prefetch limit allows and
records them as unacknowledged in the same atomic step (kombu's own format: a worker
that dies right after still loses none; `restore_visible` puts them back).
"""
from __future__ import annotations

import logging
from queue import Empty
from time import time

from kombu.transport import redis, virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.exceptions import NoScriptError, ResponseError

log = logging.getLogger(__name__)


def _connection_gone(qos) -> bool:
    connection = getattr(qos.channel, "connection", None)
    return connection is None or getattr(connection, "client", None) is None


# KEYS: the queue's lists from highest priority down, then kombu's unacked hash and index.
# ARGV: how many to take, the time to index them at. Pops in BRPOP's order and records each
# message as kombu's QoS.append does ([payload, exchange, routing key] under its delivery
# tag); one it cannot read goes back where it was and ends the batch.
TAKE_MORE = """
local unacked, index = KEYS[#KEYS - 1], KEYS[#KEYS]
local taken = {}
for k = 1, #KEYS - 2 do
  while #taken < tonumber(ARGV[1]) do
    local item = redis.call('RPOP', KEYS[k])
    if not item then break end
    local ok, message = pcall(cjson.decode, item)
    local properties = ok and type(message) == 'table' and message.properties
    local info = type(properties) == 'table' and properties.delivery_info
    local tag = type(properties) == 'table' and properties.delivery_tag
    if type(tag) ~= 'string' or type(info) ~= 'table' then
      redis.call('RPUSH', KEYS[k], item)
      return taken
    end
    redis.call('ZADD', index, ARGV[2], tag)
    redis.call('HSET', unacked, tag,
      '[' .. item .. ',' .. cjson.encode(info.exchange or '') .. ',' .. cjson.encode(info.routing_key or '') .. ']')
    taken[#taken + 1] = item
  end
end
return taken
"""
# At most this many at once when the channel has no prefetch limit.
MAX_BATCH = 256


class QoS(redis.QoS):
    """Acks, rejects and restores on a channel whose connection died are given up, not fatal.

    The message stays in Redis's unacked index; `restore_visible` puts it back in the
    queue after the visibility timeout. A task redelivered that way is harmless: the
    run's lease lets only one worker advance it.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded: set[str] = set()   # delivery tags TAKE_MORE already recorded as unacked

    def append(self, message, delivery_tag):
        if delivery_tag in self.recorded:
            self.recorded.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:
            super().append(message, delivery_tag)

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
    _take_more_sha: str | None = None
    takes_batches = True   # off once a Redis refuses scripts (some managed ones do)

    def _brpop_read(self, **options):
        """kombu's, and once a message is found, the rest of the burst (TAKE_MORE) delivered with it."""
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()  # the next poll reconnects
                raise
            if not dest__item:
                raise Empty()
            dest, item = dest__item
            queue = bytes_to_str(dest).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(queue)
            self.connection._deliver(loads(bytes_to_str(item)), queue)
            for payload in self._take_more(queue):
                self.connection._deliver(payload, queue)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()  # the BRPOP connection is idle: kombu's moment for a re-auth

    def _take_more(self, queue: str) -> list[dict]:
        """Up to the prefetch limit's room more messages of `queue`, already recorded as unacked."""
        room = self.qos.can_consume_max_estimate()
        room = MAX_BATCH if room is None else min(room, MAX_BATCH)
        # With a global key prefix, kombu's prefixing client would leave the script's keys bare.
        if room <= 0 or not self.takes_batches or self.global_keyprefix:
            return []
        keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps]
        keys += [self.unacked_key, self.unacked_index_key]
        with self.conn_or_acquire() as client:
            try:
                taken = self._run_take_more(client, keys, room)
            except ResponseError as exc:
                log.warning("queued tasks are taken one at a time: Redis refused the batch script (%s)", exc)
                self.takes_batches = False
                return []
        payloads = [loads(bytes_to_str(item)) for item in taken]
        self.qos.recorded.update(payload["properties"]["delivery_tag"] for payload in payloads)
        return payloads

    @classmethod
    def _run_take_more(cls, client, keys: list[str], room: int) -> list[bytes]:
        if cls._take_more_sha is None:
            cls._take_more_sha = client.script_load(TAKE_MORE)
        try:
            return client.evalsha(cls._take_more_sha, len(keys), *keys, room, time())
        except NoScriptError:  # Redis restarted and forgot it
            cls._take_more_sha = client.script_load(TAKE_MORE)
            return client.evalsha(cls._take_more_sha, len(keys), *keys, room, time())


class Transport(redis.Transport):
    Channel = Channel
