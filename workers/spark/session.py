"""The worker process's SparkSession: made on first use, configured from settings, its jobs
tagged per task so they can be cancelled from the event loop, stopped at shutdown.

pyspark is an optional extra, imported here only inside functions. The facts this module
relies on were measured with PySpark 4.3.0 on Java 17 (docs/spark.md): the fast-start conf
halves a local session's start-up; executors run the system python unless PYSPARK_PYTHON
names ours; code the executors cannot import must be shipped by value; job tags
(`addJobTag`/`cancelJobsWithTag`) cancel from another thread where `spark.addTag`/
`interruptTag` does not (except over Spark Connect); and a short job waits behind a long
one unless the FAIR scheduler gives each task its own pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from taskq.errors import SparkUnavailable, TaskTimeout
from taskq.settings import Settings
from taskq.workers.spark import connect
from taskq.workers.spark.conf import (
    ALLOCATION,
    CONNECT_FIX,
    INSTALL_FIX,
    JAVA_FIX,
    check_java,
    session_conf,
    write_pools,
)
from taskq.workers.spark.shipping import Shipper

log = logging.getLogger("taskq.worker")
T = TypeVar("T")

CANCEL_EVERY = 0.5  # seconds between repeated cancels while a cancelled call winds down
CANCEL_WAIT = 10.0  # then the thread is left to finish on its own
STOP_WAIT = 30.0  # seconds a session gets to stop at shutdown
# seconds a session gets to start (a local JVM takes 35-50 s on a loaded 2-core machine):
# past it the attempt fails with SparkUnavailable and is retried, never waits unbounded
START_WAIT = 180.0


class SparkRuntime:
    """One SparkSession per worker process, created lazily (off the event loop).

    `SparkRuntime(settings)` makes and owns its session; `SparkRuntime.attach(session)`
    uses an existing one and never stops it (tests share one session across workers).
    """

    def __init__(self, settings: Settings, session: Any = None, threads: int = 32) -> None:
        self.master = settings.spark_master
        self.conf = session_conf(settings)
        self.owned = session is None
        self.started_in: float | None = None  # seconds the session took to start
        self._session = session
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="taskq-spark")
        self.shipper = Shipper()  # code the executors get by value
        self.pools: set[str] = set()  # FAIR pools to declare when the session starts
        self._pools_file: str | None = None
        self._parallelism: int | None = None  # of the current session, learned on first use
        # batches through the DataFrame API (mapInArrow): over Connect, which has no RDD API
        # (a classic session keeps the faster RDD path; the benchmark sets it to compare)
        self.frames = self.is_connect
        self._marked = False  # this runtime's session set PySpark's Connect mark

    @classmethod
    def attach(cls, session: Any, settings: Settings | None = None) -> SparkRuntime:
        """A runtime on an existing SparkSession, which `stop()` leaves running."""
        return cls(settings or Settings(), session=session)

    @property
    def is_connect(self) -> bool:
        """Spark Connect (`sc://`): no SparkContext or RDD API on this side."""
        return self.master.startswith("sc://")

    def ship(self, fn: Callable[..., Any]) -> None:
        """Make `fn`'s package picklable by value, so executors need not import it."""
        self.shipper.ship(fn)

    def check(self) -> None:
        """Raise SparkUnavailable, naming the fix, if pyspark or Java is missing."""
        if self._session is not None:
            return
        try:
            import pyspark
        except ImportError:
            raise SparkUnavailable("Spark tasks need pyspark", INSTALL_FIX) from None
        if self.is_connect:  # a Connect client talks gRPC and needs no local JVM
            try:
                import pyspark.sql.connect.session  # noqa: F401  (grpc, pandas, pyarrow)
            except ImportError as exc:
                raise SparkUnavailable(f"Spark Connect needs {exc.name}", CONNECT_FIX) from None
        else:
            check_java()

    # -- the session ------------------------------------------------------------------------
    async def session(self) -> Any:
        """The SparkSession, started on first use in a thread (it takes seconds); over
        Connect, a new one when the server closed the last (it restarted)."""
        if self._session is not None and not connect.stopped(self._session):
            return self._session
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                asyncio.shield(loop.run_in_executor(self._threads, self.start)), START_WAIT
            )
        except TimeoutError:
            raise SparkUnavailable(
                f"the Spark session on {self.shown} did not start within {START_WAIT:g}s",
                "the attempt is retried; check the cluster or Connect server",
            ) from None

    def start(self) -> Any:
        """The SparkSession, started now if it is not yet (blocks for seconds)."""
        with self._lock:
            if self._session is None or connect.stopped(self._session):
                self.check()
                began = time.monotonic()
                self._session, self._parallelism = self._build(), None
                self.started_in = time.monotonic() - began
                log.info(
                    "spark session on %s started in %.1fs",
                    self.shown,
                    self.started_in,
                )
            return self._session

    def parallelism(self) -> int:
        """Partitions a batch is split into: the session's default parallelism (blocks)."""
        session = self._session
        if self._parallelism is None:
            if self.is_connect:
                self._parallelism = connect.parallelism(session)
            else:
                self._parallelism = int(session.sparkContext.defaultParallelism)
        return self._parallelism

    def lost(self, exc: BaseException) -> bool:
        """Whether `exc` ended this Connect session (the server went away or restarted);
        if so the session is dropped, and the next use makes a new one."""
        session = self._session
        if not self.is_connect or not connect.is_lost(session, exc):
            return False
        if session is None:  # dropped already: the error still says the session is gone
            return True
        with self._lock:
            if self._session is session:
                self._session = None
        log.warning("spark connect session on %s lost: %s", self.shown, _first_line(exc))
        # closed in the background (a dead channel's close can block), and not with stop(),
        # which holds PySpark's process-wide session lock through a release RPC to the lost
        # server and the close, a lock that making the next session needs
        threading.Thread(target=connect.close, args=(session,), daemon=True).start()
        return True

    @property
    def shown(self) -> str:
        """The master, fit for logs (a Connect token hidden)."""
        return connect.shown(self.master)

    def _build(self) -> Any:
        if self.is_connect:
            # a session built again (the first lost) keeps the mark its first one set
            self._marked = self._marked or connect.MODE not in os.environ
            try:
                return connect.build(self.master, dict(self.conf))
            except Exception as exc:
                raise SparkUnavailable(
                    f"Spark Connect session on {self.shown} failed ({_first_line(exc)})",
                    "check TASKQ_SPARK_MASTER and that the Connect server runs",
                ) from exc
        from pyspark.sql import SparkSession

        # Executors run the system python otherwise, without taskq's dependencies.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if self.master.startswith("local"):  # no guessing at a network address to bind
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.appName("taskq-worker").master(self.master)
        conf = dict(self.conf)
        if self.pools and ALLOCATION not in conf:
            self._pools_file = conf[ALLOCATION] = write_pools(self.pools)
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise SparkUnavailable(
                f"Spark did not start on master {self.master!r} ({_first_line(exc)})",
                f"check TASKQ_SPARK_MASTER and spark_conf; {JAVA_FIX}",
            ) from exc
        return session

    async def stop(self) -> None:
        """Stop the session if this runtime made it (an attached one runs on); release the
        threads."""
        session, self._session = self._session, None
        if session is not None and self.owned:
            # not on our pool, whose threads may be stuck in driver code; stop() also
            # cancels whatever jobs are still running
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.to_thread(session.stop), STOP_WAIT)
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._marked:  # PySpark marked the process as Connect's: a classic session may follow
            os.environ.pop(connect.MODE, None)
            self._marked = False
        if self._pools_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._pools_file)

    # -- running and cancelling tagged jobs -------------------------------------------------
    def run_tagged(self, tag: str, pool: str, fn: Callable[..., T], *args: Any) -> T:
        """Call `fn(*args)` in this thread with every Spark job it submits tagged `tag`.

        Tags and the scheduler pool are thread-local properties; pool threads are reused,
        so both are removed again in `finally`.
        """
        session = self._session
        if self.is_connect:
            session.addTag(tag)
            try:
                return fn(*args)
            finally:
                session.removeTag(tag)
        sc = session.sparkContext
        sc.addJobTag(tag)
        sc.setInterruptOnCancel(True)
        sc.setLocalProperty("spark.scheduler.pool", pool)
        try:
            return fn(*args)
        finally:
            sc.removeJobTag(tag)
            sc.setLocalProperty("spark.scheduler.pool", None)

    def cancel(self, tag: str) -> None:
        """Cancel every running job tagged `tag` (from any thread)."""
        session = self._session
        if session is None:
            return
        if self.is_connect:
            session.interruptTag(tag)  # over Connect, tags are session-wide
        else:
            session.sparkContext.cancelJobsWithTag(tag)

    async def supervise(
        self, call: Callable[[], T], tag: str, task: str, timeout: float | None
    ) -> T:
        """Run `call` (which submits jobs tagged `tag`) in a thread, bounded by `timeout`.

        Cancelling an asyncio task does not stop a Spark job (docs/spark.md), so on timeout or
        cancellation the jobs are cancelled by tag, repeatedly until the thread returns
        (the function may submit another job after the first is cancelled).
        """
        loop = asyncio.get_running_loop()
        bound = functools.partial(contextvars.copy_context().run, call)
        future = loop.run_in_executor(self._threads, bound)
        try:
            async with asyncio.timeout(timeout) as scope:
                return await asyncio.shield(future)
        except TimeoutError:
            if not scope.expired():
                raise
            await self._cancel_until_done(tag, future)
            raise TaskTimeout(task, timeout or 0.0) from None
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel_until_done(tag, future))
            raise

    async def _cancel_until_done(self, tag: str, future: asyncio.Future[Any]) -> None:
        deadline = time.monotonic() + CANCEL_WAIT
        while not future.done() and time.monotonic() < deadline:
            # not on our own pool: its threads may all be busy running the jobs
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.cancel, tag)
            await asyncio.wait([future], timeout=CANCEL_EVERY)
        if future.done() and not future.cancelled():
            future.exception()  # retrieved: the caller reports the timeout, not this error
        if not future.done():
            log.warning("spark call tagged %s still running after its jobs were cancelled", tag)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
