"""The slot table: what each child is running, in memory shared by the supervisor and children.

A child writes its slot when it takes a task and clears it when the outcome is written; the
supervisor reads the slots to renew leases, to put a dead child's task back at once, and to kill
a child stuck past its task's timeout. Nothing crosses a pipe on the way, so the hot path costs
no system call.

Each slot is guarded by a sequence number (a seqlock): the writer makes it odd while it writes
and even when done, and a reader retries until it reads the same even number before and after.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

#: seq, queue index, epoch, task id (up to 64 ASCII characters), started (monotonic), timeout (s).
RECORD = struct.Struct("<Ihq64sdd")
#: Longest task id a slot holds; a longer (hand-made) id is left to the lease to recover.
MAX_ID = 64


@dataclass(frozen=True, slots=True)
class Running:
    """A task a child runs: enough to renew its lease or put it back."""

    task_id: str
    queue_index: int
    epoch: str
    started: float
    timeout: float


class SlotTable:
    """One fixed-size record per child, in an anonymous shared mapping created before fork."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.memory = mmap.mmap(-1, RECORD.size * size)

    def set(self, index: int, running: Running) -> None:
        """Record that the child in slot index runs this task."""
        offset = index * RECORD.size
        seq = RECORD.unpack_from(self.memory, offset)[0]
        struct.pack_into("<I", self.memory, offset, seq + 1)  # odd: writing
        RECORD.pack_into(
            self.memory,
            offset,
            seq + 1,
            running.queue_index,
            int(running.epoch),
            running.task_id.encode("ascii", "replace"),
            running.started,
            running.timeout,
        )
        struct.pack_into("<I", self.memory, offset, seq + 2)

    def clear(self, index: int) -> None:
        """Record that the child in slot index runs nothing."""
        offset = index * RECORD.size
        seq = RECORD.unpack_from(self.memory, offset)[0]
        struct.pack_into("<I", self.memory, offset, seq + 1)
        RECORD.pack_into(self.memory, offset, seq + 1, 0, 0, b"", 0.0, 0.0)
        struct.pack_into("<I", self.memory, offset, seq + 2)

    def get(self, index: int) -> Running | None:
        """What the child in slot index runs, if anything (a consistent read)."""
        offset = index * RECORD.size
        while True:
            seq, queue_index, epoch, raw_id, started, timeout = RECORD.unpack_from(
                self.memory, offset
            )
            if seq % 2 == 0 and struct.unpack_from("<I", self.memory, offset)[0] == seq:
                break
        task_id = raw_id.rstrip(b"\0").decode("ascii", "replace")
        if not task_id:
            return None
        return Running(task_id, queue_index, str(epoch), started, timeout)
