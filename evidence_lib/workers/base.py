"""The machinery every worker shares: a connection pool, a bounded handler pool, a stop flag,
graceful shutdown with a bound, and SIGINT/SIGTERM handling. Subclasses implement `poll`."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Self, overload

import psycopg

from evidence_lib.engine.flows import AnyFlow, Flow, S, StepQueuedFlow
from evidence_lib.workers.config import SafeLog, WorkerConfig, resolve_queue
from evidence_lib.workers.connections import ConnectionSource, Outages, ReconnectPolicy
from evidence_lib.workers.timing import CallTimes, maybe_timed


class WorkerBase:
    """Lifecycle of a worker for one plain flow, or for one step of a step-queued flow."""

    default_name = "worker"  # the connection's application_name when none is given

    @overload
    def __init__(
        self,
        url: str,
        flow: Flow[Any],
        step: None = None,
        *,
        config: WorkerConfig | None = None,
        logger: logging.Logger | None = None,
        name: str | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        url: str,
        flow: StepQueuedFlow[S],
        step: S,
        *,
        config: WorkerConfig | None = None,
        logger: logging.Logger | None = None,
        name: str | None = None,
    ) -> None: ...

    def __init__(
        self,
        url: str,
        flow: AnyFlow,
        step: str | None = None,
        *,
        config: WorkerConfig | None = None,
        logger: logging.Logger | None = None,
        name: str | None = None,
    ) -> None:
        """A plain flow's worker takes no step; a step-queued flow's worker names one of its
        steps. The overloads let a type checker reject a wrong selector; `resolve_queue`
        rejects it at run time, before any database work."""
        self.queue, self.step = resolve_queue(flow, step)  # before any database work
        self.flow = flow
        self.url = url
        self.config = config or self.default_config()
        self.name = name or self.default_name
        self.log = SafeLog(logger or logging.getLogger(f"evidence_lib.worker.{flow.slug}"))
        self._stop = threading.Event()
        self._closing = False
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.config.concurrency)
        self._slot_freed = threading.Event()
        self._pool: ConnectionSource | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._futures: set[Future[None]] = set()
        self.timings: CallTimes | None = None  # set to a CallTimes to measure every SQL call
        self.poll_transport_errors = 0
        self.outages = Outages()  # what this worker saw of the server (its connection source's)
        self.setup()

    def setup(self) -> None:
        """What a subclass adds to a new worker (its statistics); runs at the end of __init__."""

    @classmethod
    def default_config(cls) -> WorkerConfig:
        return WorkerConfig()

    @classmethod
    def serving(cls, url: str, flow: AnyFlow, step: str | None = None, **options: Any) -> Self:
        """A worker for a flow whose mode is only known at run time: the step selector is
        checked by `resolve_queue` (StepSelectorError) instead of by the type checker."""
        make: Any = cls
        worker: Self = make(url, flow, step, **options)
        return worker

    def __enter__(self) -> WorkerBase:
        self._pool = ConnectionSource(
            self.url,
            size=self.config.concurrency + 1,
            policy=self.reconnect_policy(),
            application_name=self.name,
            log=lambda level, event, message: self.log(level, event, message),
        )
        self.outages = self._pool.outages
        self._executor = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix=self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reconnect_policy(self) -> ReconnectPolicy:
        """How this worker waits for a lost server (WorkerConfig; a seam of the negative controls)."""
        c = self.config
        return ReconnectPolicy(c.connect_timeout, c.reconnect_initial, c.reconnect_cap)

    @property
    def pool(self) -> ConnectionSource:
        if self._pool is None:
            raise RuntimeError(f"worker {self.name} is not open: use `with Worker(...)`")
        return self._pool

    def close(self) -> None:
        """Stop reading; wait up to the shutdown grace for running handlers; release everything."""
        self._stop.set()
        if self._executor is not None:
            with self._lock:
                running = set(self._futures)
            wait(running, timeout=self.config.shutdown_grace)
            self._closing = True
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def request_shutdown(self) -> None:
        """Stop reading; running handlers may finish within the shutdown grace."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, handle_signals: bool = True) -> None:
        """Poll until shutdown (SIGINT/SIGTERM when `handle_signals` in the main thread)."""
        with self._signals(handle_signals):
            while not self._stop.is_set():
                self._slot_freed.clear()
                free = self.free_slots()
                if free == 0:  # every slot busy: wake up when one frees, not later
                    self._slot_freed.wait(self.config.poll_interval)
                    continue
                try:
                    idle = self.drained(self.poll(), free)
                except psycopg.OperationalError as exc:
                    self.on_poll_transport_error(exc)
                    idle = True
                if idle:
                    self.idle_wait()
                else:
                    self.busy()
        self.close()

    def idle_wait(self) -> None:
        """Nothing was read: wait before the next poll (a subclass may wait for a wake-up)."""
        self._stop.wait(self.config.poll_interval)

    def drained(self, read: int, free: int) -> bool:
        """Whether the queue looked empty after a poll that read `read` messages with `free`
        slots: then the worker waits before it reads again."""
        return read == 0

    def busy(self) -> None:
        """Something was read (a subclass that waited for wake-ups stops waiting for them)."""

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        raise NotImplementedError

    def on_poll_transport_error(self, exc: psycopg.OperationalError) -> None:
        """The connection source logs the server going away and coming back, once each; a poll
        that fails meanwhile only waits for the next one (no line per retry)."""
        self.poll_transport_errors += 1

    def free_slots(self) -> int:
        taken = 0
        while taken < self.config.concurrency and self._slots.acquire(blocking=False):
            taken += 1
        for _ in range(taken):
            self._slots.release()
        return taken

    def submit(self, job: Callable[[], None]) -> Future[None]:
        """Run `job` on the handler pool, holding one concurrency slot while it runs."""
        assert self._executor is not None
        self._slots.acquire()

        def guarded() -> None:
            try:
                job()
            finally:
                self._slots.release()
                self._slot_freed.set()

        future = self._executor.submit(guarded)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def timed(self, name: str) -> AbstractContextManager[None]:
        """Measure one SQL round trip when `timings` is set (the benchmarks set it)."""
        return maybe_timed(self.timings, name)

    @property
    def closing(self) -> bool:
        """True once the shutdown grace is over: late handlers must not report anymore."""
        return self._closing

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, lambda *_: self.request_shutdown())
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
