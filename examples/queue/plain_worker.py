"""A BullMQ worker in Python written from BullMQ's documentation alone: it publishes nothing
to plan-cli. A plan declares its tool (`tools:` with the queue `texts`), and plan-cli sends
each call of it here as a job named after the tool, with data
`{tool, args, run_id, step_id, attempt, deadline}`. What it returns is the call's result; what
it raises fails the call; `job.updateProgress` is the call's `tool.progress`.

    pip install bullmq
    REDIS_URL=redis://127.0.0.1:6379 python plain_worker.py
"""

import asyncio
import os
import signal
import sys

from bullmq import Worker


async def process(job, token):
    text = job.data["args"]["text"]
    await job.updateProgress(50)
    return {"words": len(text.split()), "by": "python"}


async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    worker = Worker("texts", process, {"connection": url})
    print("python worker ready on queue texts", file=sys.stderr, flush=True)
    await stop.wait()
    await worker.close()


asyncio.run(main())
