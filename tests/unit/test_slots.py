"""The slot table children and supervisor share: consistent reads, and slots a dead child left.

Found by the reliability battery's review of kill -9: a child killed between the two halves of
a slot write leaves the sequence number odd, and `get` used to spin on it forever (the
supervisor reads the slot of a child it reaps), while the next child's writes flipped its parity.
"""

from __future__ import annotations

import os
import signal
import struct
import time

from django_jobs.worker.slots import RECORD, SEQ, Running, SlotTable

TASK = Running("a" * 32, 1, "7", 12.5, 30.0)


def seq(table: SlotTable, index: int = 0) -> int:
    return int(struct.unpack_from("<I", table.memory, index * RECORD.size)[0])


def test_slot_table__set_get_clear() -> None:
    table = SlotTable(2)

    table.set(1, TASK)

    assert table.get(0) is None
    assert table.get(1) == TASK
    table.clear(1)
    assert table.get(1) is None


def test_slot_table__torn_slot_reads_empty_instead_of_spinning() -> None:
    table = SlotTable(1)
    table.set(0, TASK)
    struct.pack_into("<I", table.memory, 0, seq(table) + 1)  # killed mid-write: odd, for good

    started = time.monotonic()
    assert table.get(0) is None
    assert time.monotonic() - started < 1


def test_slot_table__reset_of_a_torn_slot_makes_it_usable_again() -> None:
    table = SlotTable(1)
    table.set(0, TASK)
    struct.pack_into("<I", table.memory, 0, seq(table) + 1)

    assert table.reset(0) is None  # half-written: the lease will recover the task

    assert seq(table) % 2 == 0
    table.set(0, TASK)  # a new child in the slot: its writes keep the parity
    assert seq(table) % 2 == 0
    assert table.get(0) == TASK


def test_slot_table__reset_of_a_whole_slot_returns_its_task() -> None:
    table = SlotTable(1)
    table.set(0, TASK)

    assert table.reset(0) == TASK
    assert table.get(0) is None


def test_slot_table__sequence_wraps_without_error() -> None:
    table = SlotTable(1)
    struct.pack_into("<I", table.memory, 0, SEQ - 1)  # 2**32 - 2 writes so far

    table.set(0, TASK)
    table.clear(0)
    table.set(0, TASK)

    assert table.get(0) == TASK
    assert seq(table) == 4  # 2**32 - 2, +2 (wrapped to 0), +2, +2


def test_slot_table__child_killed_while_writing_never_jams_the_reader() -> None:
    # A child writing as fast as it can, killed at a random moment, many times: whatever state
    # it leaves, get() returns and reset() leaves a slot that reads and writes normally.
    for attempt in range(50):
        table = SlotTable(1)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the writer
            while True:
                table.set(0, TASK)
                table.clear(0)
        time.sleep(0.001 + attempt * 0.0001)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

        assert table.get(0) in (None, TASK)
        table.reset(0)
        table.set(0, TASK)
        assert table.get(0) == TASK


def test_slot_table__lost_mark_names_one_run_of_one_slot() -> None:
    table = SlotTable(2)
    table.set(1, TASK)

    table.mark_lost(1, TASK)

    assert table.is_lost(1, TASK.task_id, TASK.epoch)
    assert not table.is_lost(0, TASK.task_id, TASK.epoch)
    # The child moved on: the same task under a later epoch (or another task) is not lost.
    assert not table.is_lost(1, TASK.task_id, "8")
    assert not table.is_lost(1, "b" * 32, TASK.epoch)


def test_slot_table__keeps_what_a_timed_out_run_needs() -> None:
    table = SlotTable(2)
    running = Running("t1", 1, "7", 12.5, 30.0, attempt=3, max_attempts=5, backoff=15.25)

    table.set(1, running)

    assert table.get(1) == running
    assert table.reset(1) == running
    assert table.get(1) is None
