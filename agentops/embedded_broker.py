"""The embedded Celery broker: kombu's filesystem transport, made crash-safe.

kombu writes each message file in place, so a worker polling the folder can read
a half-written file, fail to decode it and lose the message (kombu #1551). Here a
message is written to a temporary file and renamed into the queue folder, and a
consumer claims a message by renaming it, so exactly one worker reads each
message and never a partial one.
"""
from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads


class Channel(filesystem.Channel):
    def _staging_dir(self) -> str:
        path = os.path.join(self.data_folder_out, ".staging")
        os.makedirs(path, exist_ok=True)
        return path

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000)):015d}_{uuid.uuid4()}.{queue}.msg"
        staged = os.path.join(self._staging_dir(), name)
        with open(staged, "wb") as fh:
            fh.write(str_to_bytes(dumps(payload)))
            fh.flush()
            os.fsync(fh.fileno())
        # os.replace is atomic on one filesystem: readers see all of it or nothing.
        os.replace(staged, os.path.join(self.data_folder_out, name))

    def _get(self, queue):
        suffix = f"{queue}.msg"
        claimed_dir = os.path.join(self.data_folder_in, ".claimed")
        os.makedirs(claimed_dir, exist_ok=True)
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != suffix:
                continue
            claimed = os.path.join(claimed_dir, f"{uuid.uuid4().hex}-{name}")
            try:
                # Rename is the claim: of several workers exactly one succeeds.
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue
            with open(claimed, "rb") as fh:
                payload = fh.read()
            os.remove(claimed)
            return loads(bytes_to_str(payload))
        raise Empty()

    def _size(self, queue):
        suffix = f"{queue}.msg"
        return sum(1 for n in os.listdir(self.data_folder_in) if n.partition(".")[2] == suffix)


class Transport(filesystem.Transport):
    Channel = Channel
    driver_type = "agentops-filesystem"
    driver_name = "agentops-filesystem"
