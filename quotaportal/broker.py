"""kombu's filesystem transport, with messages written atomically.

The stock transport creates a message file under its final name and then writes it, so a worker polling the
folder can pick up an empty file and die on it (`JSONDecodeError`). Here the file is written under a name
no consumer matches and renamed into place once complete.

A worker on a polling transport runs Celery's synchronous loop, which waits up to 2 s for a message per round
and, once told to stop, runs one more round: a warm shutdown took 4-6 s, past the 5 s honcho (`make run`)
allows before SIGKILL. Here a round waits at most DRAIN_SLICE_SECONDS, so Ctrl-C stops the worker in about a
second; a message is still taken as soon as it is there.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.partial"
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc


DRAIN_SLICE_SECONDS = 0.5


class Transport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        if timeout is None or timeout > DRAIN_SLICE_SECONDS:
            timeout = DRAIN_SLICE_SECONDS
        return super().drain_events(connection, timeout=timeout)
