"""step() and run() release the GIL: a Python thread makes progress while a step runs."""

import threading
import time

from conftest import SMALL_MODEL


def test_python_thread_runs_during_a_step(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 50}, mode="generic")

    def chain(n):  # a deep left-branching tree: a long generic step
        t = ("Leaf", 1, 1)
        for i in range(n):
            t = ("Node", t, ("Leaf", (i % 49) + 1, i % 5), i % 5)
        return t

    batch = s.to_batch("loss", [chain(200) for _ in range(10)])
    t0 = time.perf_counter()
    s.step("loss", batch)
    one = time.perf_counter() - t0
    # Steps of at least 50 ms: held through a step, the GIL would let the thread run at most
    # one switch interval (5 ms) per step, a tenth of the time.
    reps = max(1, int(0.05 / max(one, 1e-4)) + 1)
    big = s.to_batch("loss", [chain(200) for _ in range(10 * reps)])
    count = 0
    done = threading.Event()

    def spin():
        nonlocal count
        while not done.is_set():
            count += 1

    th = threading.Thread(target=spin)
    th.start()
    # The thread's pace while this one sleeps (the GIL released), then during steps.
    time.sleep(0.02)
    start, t0 = count, time.perf_counter()
    time.sleep(0.2)
    rate = (count - start) / (time.perf_counter() - t0)
    # Steps for at least 0.2 s (however fast this machine runs them), then the thread's count.
    start = count
    t0 = time.perf_counter()
    steps = 0
    while steps < 2 or time.perf_counter() - t0 < 0.2:
        s.step("loss", big)
        steps += 1
    elapsed = time.perf_counter() - t0
    during = count - start
    done.set()
    th.join()
    assert during > 0.3 * rate * elapsed, (during, rate, elapsed, steps)


def test_threads_sharing_a_session_take_turns(pejit):
    s = pejit.Session.from_source(SMALL_MODEL, "small.pe", dims={"V": 50}, mode="auto")
    batch = s.to_batch("loss", [("Node", ("Leaf", 3, 1), ("Leaf", 4, 2), 4)] * 5)
    errors = []

    def work():
        try:
            for _ in range(20):
                s.step("loss", batch)
                s.stats()
                s.param("W_out").sum()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert s.stats()["per_entry"]["loss"]["batches"] == 80
