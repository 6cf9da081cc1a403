"""The arq worker, made to ride out a Redis outage instead of exiting with it."""

from __future__ import annotations

import asyncio
import logging
import time

from arq.worker import Worker
from redis import Redis
from redis.exceptions import RedisError

logger = logging.getLogger("libflow.worker")

# How often a worker that lost Redis tries it again.
REDIS_RETRY_SECONDS = 1.0


class LibflowWorker(Worker):
    """arq's Worker, except that losing Redis pauses the polling loop rather than ending it.

    arq lets a failed poll end ``main()``, and the process exits: every worker of a
    deployment would die with a Redis restart. Here the running jobs go on (those that
    reach Redis at the end fail to record a result, as they would have anyway), the
    worker waits for Redis, and takes jobs again when it is back. Whatever the outage lost
    from the queue, the sweeps find again in the database (pending deliveries, files
    stuck in processing).
    """

    _redis_down = False

    async def _poll_iteration(self) -> None:
        try:
            await super()._poll_iteration()
        except (RedisError, OSError) as err:
            if not self._redis_down:
                logger.warning("Redis is unreachable, waiting for it: %r", err)
            self._redis_down = True
            await asyncio.sleep(REDIS_RETRY_SECONDS)
            return
        if self._redis_down:
            self._redis_down = False
            logger.warning("Redis is back: taking jobs again")

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's, giving back the slot of a job whose start Redis cut short.

        arq takes a slot (its semaphore and job counter) before asking Redis whether the
        job may start; a Redis error there would keep the slot for good. Only that one
        slot can be held: every Redis call in arq's start_jobs comes after taking it.
        """
        try:
            await super().start_jobs(job_ids)
        except (RedisError, OSError):
            self.job_counter -= 1
            self.sem.release()
            raise


def wait_for_redis(url: str) -> None:
    """Block until Redis answers a PING: a worker started before Redis waits for it.

    arq's own start-up gives up after five tries, and the process would exit; a worker
    started with (or before) its Redis should come up when Redis does.
    """
    client = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        waiting = False
        while True:
            try:
                client.ping()
                break
            except (RedisError, OSError) as err:
                if not waiting:
                    logger.warning("waiting for Redis at start-up: %r", err)
                    waiting = True
                time.sleep(REDIS_RETRY_SECONDS)
        if waiting:
            logger.warning("Redis is up: starting")
    finally:
        client.close()
