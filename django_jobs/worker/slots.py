"""The slot table: what each child is running, in memory shared by the supervisor and children.

A child writes its slot when it takes a task and clears it when the outcome is written; the
supervisor reads the slots to renew leases, to put a dead child's task back at once, and to kill
a child stuck past its task's timeout. Nothing crosses a pipe on the way, so the hot path costs
no system call.

Each slot is guarded by a sequence number (a seqlock): the writer makes it odd while it writes
and even when done, and a reader retries until it reads the same even number before and after.

Beside each slot, the supervisor marks a run whose lease was lost (task id and epoch) before it
signals the child, which interrupts its run only if it is that very run: the child may have
moved on to another task between the supervisor's look and its signal. A run whose task was
asked to cancel is marked the same way, in marks of its own (one signal carries both).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

#: seq, queue index, epoch, task id (up to 64 ASCII characters), started (monotonic), timeout (s),
#: attempt, max attempts, backoff (s): what the supervisor needs to decide a timed-out run.
RECORD = struct.Struct("<Ihq64sddIId")
#: A run whose lease was lost: epoch, task id. Written by the supervisor only, then signalled.
LOST = struct.Struct("<q64s")
#: An empty record after its sequence number.
EMPTY = (0, 0, b"", 0.0, 0.0, 0, 0, 0.0)
#: Longest task id a slot holds; a longer (hand-made) id is left to the lease to recover.
MAX_ID = 64
#: Reads of a slot caught mid-write before `get` reports it empty: a writer holds a slot for
#: microseconds, but one killed mid-write would hold it forever.
SPINS = 10_000
#: The sequence number is 32 bits: it wraps (keeping its parity) after 2**32 writes.
SEQ = 0xFFFFFFFF
#: Where a record's task id starts: after the sequence number, queue index and epoch.
ID_OFFSET = struct.calcsize("<Ihq")


@dataclass(frozen=True, slots=True)
class Running:
    """A task a child runs: enough to renew its lease, put it back, or retry it after its
    timeout without reading it from Redis."""

    task_id: str
    queue_index: int
    epoch: str
    started: float
    timeout: float
    #: The run's attempt (1 for the first), of max_attempts.
    attempt: int = 1
    max_attempts: int = 1
    #: Seconds before the next run if this one fails.
    backoff: float = 0.0


class SlotTable:
    """One fixed-size record per child, in an anonymous shared mapping created before fork."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.memory = mmap.mmap(-1, RECORD.size * size)
        self.lost_marks = mmap.mmap(-1, LOST.size * size)
        self.cancel_marks = mmap.mmap(-1, LOST.size * size)

    def set(self, index: int, running: Running) -> None:
        """Record that the child in slot index runs this task."""
        offset = index * RECORD.size
        seq = RECORD.unpack_from(self.memory, offset)[0]
        struct.pack_into("<I", self.memory, offset, (seq + 1) & SEQ)  # odd: writing
        RECORD.pack_into(
            self.memory,
            offset,
            (seq + 1) & SEQ,
            running.queue_index,
            int(running.epoch),
            running.task_id.encode("ascii", "replace"),
            running.started,
            running.timeout,
            running.attempt,
            running.max_attempts,
            running.backoff,
        )
        struct.pack_into("<I", self.memory, offset, (seq + 2) & SEQ)

    def clear(self, index: int) -> None:
        """Record that the child in slot index runs nothing."""
        offset = index * RECORD.size
        seq = RECORD.unpack_from(self.memory, offset)[0]
        struct.pack_into("<I", self.memory, offset, (seq + 1) & SEQ)
        RECORD.pack_into(self.memory, offset, (seq + 1) & SEQ, *EMPTY)
        struct.pack_into("<I", self.memory, offset, (seq + 2) & SEQ)

    def reset(self, index: int) -> Running | None:
        """Empty the slot of a child that exited; return what it ran if its record is whole.

        Only the supervisor calls this, once the child is reaped and nothing writes the slot. A
        child killed mid-write leaves the sequence odd, which would make every later read spin
        and every later write flip its parity: the slot starts over even.
        """
        offset = index * RECORD.size
        seq = RECORD.unpack_from(self.memory, offset)[0]
        running = self.get(index) if seq % 2 == 0 else None
        RECORD.pack_into(self.memory, offset, (seq + 2 - seq % 2) & SEQ, *EMPTY)
        return running

    def get(self, index: int) -> Running | None:
        """What the child in slot index runs, if anything (a consistent read).

        None too when no consistent read comes within SPINS tries (a write in progress, or a
        child killed mid-write, whose slot `reset` empties): ask again later.
        """
        offset = index * RECORD.size
        for _ in range(SPINS):
            seq, queue_index, epoch, raw_id, started, timeout, *attempt = RECORD.unpack_from(
                self.memory, offset
            )
            if seq % 2 == 0 and struct.unpack_from("<I", self.memory, offset)[0] == seq:
                break
        else:
            return None
        task_id = raw_id.rstrip(b"\0").decode("ascii", "replace")
        if not task_id:
            return None
        return Running(task_id, queue_index, str(epoch), started, timeout, *attempt)

    def held_elsewhere(self, index: int, task_id: str) -> bool:
        """Whether a slot other than index holds task_id, under any epoch: one scan, no lock.

        Only a slot being written at that very moment can be misread, and the caller (a child
        waiting for a stale run of its task to end) asks again.
        """
        field = task_id.encode("ascii", "replace").ljust(MAX_ID, b"\0")
        start = 0
        while (at := self.memory.find(field, start)) != -1:
            slot, within = divmod(at, RECORD.size)
            if within == ID_OFFSET and slot != index:
                return True
            start = at + 1
        return False

    def mark_lost(self, index: int, running: Running) -> None:
        """Record that this run, in slot index, lost its lease (before signalling its child)."""
        _mark(self.lost_marks, index, running)

    def is_lost(self, index: int, task_id: str, epoch: str) -> bool:
        """Whether the supervisor marked this run (task id and epoch) of slot index as lost."""
        return _marked(self.lost_marks, index, task_id, epoch)

    def mark_canceled(self, index: int, running: Running) -> None:
        """Record that this run, in slot index, was asked to cancel (before signalling)."""
        _mark(self.cancel_marks, index, running)

    def is_canceled(self, index: int, task_id: str, epoch: str) -> bool:
        """Whether the supervisor marked this run (task id and epoch) of slot index canceled."""
        return _marked(self.cancel_marks, index, task_id, epoch)


def _mark(marks: mmap.mmap, index: int, running: Running) -> None:
    task_id = running.task_id.encode("ascii", "replace")
    LOST.pack_into(marks, index * LOST.size, int(running.epoch), task_id)


def _marked(marks: mmap.mmap, index: int, task_id: str, epoch: str) -> bool:
    marked_epoch, raw_id = LOST.unpack_from(marks, index * LOST.size)
    return str(marked_epoch) == epoch and raw_id.rstrip(b"\0").decode("ascii", "replace") == task_id
