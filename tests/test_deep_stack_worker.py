"""``call_with_deep_stack`` runs every file on one long-lived large-stack thread (not a thread per file)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from torchlint.run.guard import call_with_deep_stack


def test_calls_run_on_one_thread_that_is_not_the_callers():
    threads = [call_with_deep_stack(threading.current_thread) for _ in range(5)]  # held: no id is reused
    assert all(thread is threads[0] for thread in threads)
    assert threads[0] is not threading.current_thread()


def test_the_result_and_the_exception_of_each_call_come_back_to_the_caller():
    assert call_with_deep_stack(lambda a, b: a + b, 2, 3) == 5

    def fail() -> None:
        raise KeyError("lost")

    with pytest.raises(KeyError, match="lost"):
        call_with_deep_stack(fail)
    assert call_with_deep_stack(lambda: "next call") == "next call"  # the worker survived the exception


def test_a_call_from_the_worker_itself_runs_inline_instead_of_waiting_for_itself():
    outer = call_with_deep_stack(lambda: (threading.get_ident(), call_with_deep_stack(threading.get_ident)))
    assert outer[0] == outer[1]


def test_the_recursion_limit_is_raised_during_a_call_and_restored_after():
    before = sys.getrecursionlimit()

    def depth(n: int) -> int:
        return 0 if n == 0 else 1 + depth(n - 1)

    assert call_with_deep_stack(depth, 20_000) == 20_000  # beyond the default limit, and the default C stack
    assert sys.getrecursionlimit() == before


def test_calls_from_several_threads_each_get_their_own_result():
    results = {}

    def caller(k: int) -> None:
        results[k] = [call_with_deep_stack(lambda v: v * v, k * 100 + i) for i in range(50)]

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {k: [(k * 100 + i) ** 2 for i in range(50)] for k in range(4)}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_starts_its_own_worker():
    call_with_deep_stack(lambda: None)  # the parent's worker exists; threads do not survive a fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: would wait forever on the parent's thread
        try:
            os.write(write, str(call_with_deep_stack(lambda: 41 + 1)).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"42" and status == 0


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals only")
def test_ctrl_c_during_a_call_leaves_every_later_call_its_own_result(monkeypatch):
    """Ctrl-C while the worker runs file A: A is abandoned, and a call that was waiting for the worker (another
    thread: the language server) or that comes later gets its own result, never A's; no thread dies."""
    started, finish_a = threading.Event(), threading.Event()
    results = {}
    thread_errors: list = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: thread_errors.append(hook.exc_value))

    def slow_a() -> str:
        started.set()
        finish_a.wait(10)
        return "A"

    def second_caller() -> None:
        started.wait(10)
        results["B"] = call_with_deep_stack(lambda: "B")

    def ctrl_c() -> None:
        started.wait(10)
        time.sleep(0.3)  # the second caller is waiting for the worker by now
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever earlier tests set
    try:
        waiting = threading.Thread(target=second_caller)
        waiting.start()
        threading.Thread(target=ctrl_c).start()
        with pytest.raises(KeyboardInterrupt):
            call_with_deep_stack(slow_a)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    waiting.join(10)
    finish_a.set()
    time.sleep(0.3)  # the abandoned worker ends A
    assert results == {"B": "B"}
    assert call_with_deep_stack(lambda: "C") == "C"
    assert thread_errors == []
