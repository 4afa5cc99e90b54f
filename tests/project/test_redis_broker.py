"""The Redis transport takes a burst of queued tasks in one round trip and loses none of them.

Against the real Redis on 127.0.0.1:6379 (database 13, emptied around each test), through kombu
as a Celery worker consumes: a channel with a prefetch limit, `drain_events`, acks.
"""
import json

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from agentops import redis_broker

URL = "redis://127.0.0.1:6379/13"
QUEUE = Queue("burst", Exchange("burst", type="direct"), routing_key="burst")


pytestmark = pytest.mark.services


@pytest.fixture
def client(local_redis):
    client = redis.Redis.from_url(URL)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def _connection(**options) -> Connection:
    return Connection(URL, transport="agentops.redis_broker:Transport", transport_options=options)


def _publish(count: int) -> None:
    with _connection() as connection:
        producer = Producer(connection.channel(), exchange=QUEUE.exchange, routing_key="burst")
        for n in range(count):
            producer.publish({"n": n}, declare=[QUEUE], serializer="json")


class _Taker:
    """A consumer as a worker runs one: a prefetch limit, messages kept until acked."""

    def __init__(self, connection: Connection, prefetch: int):
        self.connection = connection
        self.messages = []
        self.channel = connection.channel()
        self.consumer = Consumer(self.channel, queues=[QUEUE], callbacks=[lambda body, m: self.messages.append(m)],
                                 accept=["json"])
        self.consumer.qos(prefetch_count=prefetch)
        self.consumer.consume()

    def drain_once(self) -> list:
        before = len(self.messages)
        self.connection.drain_events(timeout=2)
        return self.messages[before:]


def test_one_read_takes_as_many_as_the_prefetch_limit_allows_each_recorded_unacked(client):
    _publish(10)
    with _connection() as connection:
        taker = _Taker(connection, prefetch=6)
        taken = taker.drain_once()
        assert [m.payload["n"] for m in taken] == [0, 1, 2, 3, 4, 5]  # in the order they were queued
        assert client.llen("burst") == 4
        assert client.hlen("unacked") == 6 and client.zcard("unacked_index") == 6
        assert {m.delivery_tag for m in taken} == {tag.decode() for tag in client.hkeys("unacked")}
        for message in taken:
            message.ack()
        assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0
        rest = taker.drain_once()
        assert [m.payload["n"] for m in rest] == [6, 7, 8, 9]
        for message in rest:
            message.ack()
    assert client.llen("burst") == 0 and client.hlen("unacked") == 0


def test_a_consumer_lost_with_a_batch_loses_none_of_it(client):
    """The batch's unacked records are kombu's own: the visibility timeout puts every message back once."""
    _publish(5)
    with _connection() as lost:
        taken = _Taker(lost, prefetch=10).drain_once()
        assert len(taken) == 5 and client.llen("burst") == 0
        # Another worker's periodic restore, the lost one's visibility timeout past.
        with _connection(visibility_timeout=0) as other:
            other.default_channel.qos.restore_visible(num=100)
        assert client.hlen("unacked") == 0
        restored = {json.loads(item)["properties"]["delivery_tag"] for item in client.lrange("burst", 0, -1)}
        assert restored == {m.delivery_tag for m in taken}
        with _connection() as again:
            retaken = _Taker(again, prefetch=10).drain_once()
            assert sorted(m.payload["n"] for m in retaken) == [0, 1, 2, 3, 4]
            assert all(m.delivery_info.get("redelivered") for m in retaken)
            for message in retaken:
                message.ack()
    # Closing the lost consumer restored nothing twice: its records were already gone.
    assert client.llen("burst") == 0 and client.hlen("unacked") == 0


def test_an_unreadable_message_goes_back_and_ends_the_batch(client):
    _publish(2)
    client.lpush("burst", b"not json")  # behind the two published
    _publish(1)
    with _connection() as connection:
        taken = _Taker(connection, prefetch=10).drain_once()
        assert [m.payload["n"] for m in taken] == [0, 1]
        assert client.llen("burst") == 2 and client.lindex("burst", -1) == b"not json"  # next in line, as it was
        for message in taken:
            message.ack()


def test_a_redis_that_refuses_scripts_is_read_one_message_at_a_time(client, monkeypatch):
    def refused(*_args):
        raise redis.exceptions.ResponseError("NOPERM this user has no permissions to run the 'evalsha' command")

    monkeypatch.setattr(redis_broker.Channel, "_run_take_more", classmethod(lambda cls, *a: refused()))
    _publish(3)
    with _connection() as connection:
        taker = _Taker(connection, prefetch=10)
        assert len(taker.drain_once()) == 1
        assert taker.channel.takes_batches is False
        assert len(taker.drain_once()) == 1 and len(taker.drain_once()) == 1
        assert client.hlen("unacked") == 3
        for message in taker.messages:
            message.ack()
