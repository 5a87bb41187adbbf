"""How often an interrupt half-reads a message of a multiprocessing queue: a thread interrupts the
main thread (`_thread.interrupt_main`, as a stop signal's handler would run there) at a random
moment while it puts and gets small progress messages; after each interrupt the queue is read on.
A message whose header was read but not its body leaves the next read with garbage (EOFError, an
UnpicklingError, or a wait for bytes that never come). It counts interrupts, half-read messages and
lock leaks; this is why the suite's loop and its workers take stops only through
`gspo_bench.runtime.stopping.stops_deferred`.

    python experiments/reliability/interrupted_queue.py [--seconds 20]
"""

from __future__ import annotations

import _thread
import argparse
import multiprocessing
import pickle
import random
import threading
import time


def interrupt_soon(rng: random.Random) -> threading.Thread:
    def fire() -> None:
        time.sleep(rng.uniform(0, 0.002))
        _thread.interrupt_main()

    thread = threading.Thread(target=fire)
    thread.start()
    return thread


def held(lock) -> bool:
    if lock is None:
        return False
    if lock.acquire(False):
        lock.release()
        return False
    lock.release()
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    context, rng = multiprocessing.get_context("spawn"), random.Random(0)
    queue = context.SimpleQueue()
    interrupts = half_read = leaks = 0
    end = time.time() + args.seconds
    while time.time() < end:
        thread = None
        try:
            thread = interrupt_soon(rng)
            for _ in range(200):
                queue.put(("step", "run", {"step": 1}))
                while not queue.empty():
                    queue.get()
            thread.join()
        except KeyboardInterrupt:
            interrupts += 1
            if thread is not None:
                thread.join()
            leaks += held(queue._wlock) + held(queue._rlock)
            try:
                while not queue.empty():
                    queue.get()
            except (EOFError, pickle.UnpicklingError):
                half_read += 1
                queue = context.SimpleQueue()
    print(f"interrupts {interrupts}, half-read messages {half_read}, locks left held {leaks}")


if __name__ == "__main__":
    main()
