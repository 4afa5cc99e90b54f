"""Random ids: OS randomness read in bulk, distinct across threads and across fork."""
from __future__ import annotations

import os
import re
import threading

import pytest

from runtime.ids import RandomIds, SequentialIds, random_hex


def test_random_ids_are_32_hex_characters_and_do_not_repeat():
    ids = RandomIds()
    drawn = [ids.new_id() for _ in range(2_000)]  # several refills of the buffer
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in drawn)
    assert len(set(drawn)) == len(drawn)
    assert re.fullmatch(r"[0-9a-f]{16}", random_hex(8))


def test_threads_drawing_at_once_never_get_the_same_bytes():
    drawn: list[str] = []
    lock = threading.Lock()

    def draw():
        mine = [random_hex(16) for _ in range(500)]
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(drawn)) == len(drawn) == 4_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_repeat_its_parents_ids():
    random_hex(16)  # the parent's buffer now holds bytes a child must not reuse
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its next id and leave at once
        os.close(read)
        os.write(write, random_hex(16).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child != random_hex(16)


def test_sequential_ids_stay_reproducible():
    ids = SequentialIds("a")
    assert [ids.new_id() for _ in range(2)] == ["a" + "0" * 30 + "1", "a" + "0" * 30 + "2"]
