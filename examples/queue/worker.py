"""A BullMQ worker in Python that serves a tool to plan-cli: `word_count`.

    pip install bullmq
    REDIS_URL=redis://127.0.0.1:6379 python worker.py

It publishes its tools where plan-cli coordinators look (the hash `plan:tools`), so plans can
name `word_count`, and runs the jobs of its own queue (QUEUE, default `python-tools`): a queue
of its own, because a BullMQ job goes to whichever worker of a queue asks first.
"""

import asyncio
import json
import os
import signal
import socket
import time

import redis.asyncio as aioredis
from bullmq import Worker

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
QUEUE = os.environ.get("QUEUE", "python-tools")


async def word_count(args):
    text = args["text"]
    return {"words": len(text.split()), "by": "python"}


# What plan-cli needs to validate a plan, check arguments and gate approvals.
TOOLS = {
    "word_count": {
        "description": "Count the words of a text",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        "risk": "low",
        "run": word_count,
    },
}


async def main():
    redis = aioredis.from_url(URL)
    worker_id = f"python-{socket.gethostname()}-{os.getpid()}"

    async def publish():
        entry = {
            "queue": QUEUE,
            "host": socket.gethostname(),
            "seen_ms": int(time.time() * 1000),
            "tools": [
                {k: v for k, v in tool.items() if k != "run"} | {"name": name}
                for name, tool in TOOLS.items()
            ],
        }
        await redis.hset("plan:tools", worker_id, json.dumps(entry))

    # A job's data: {tool, args, run_id, step_id, attempt, deadline}. Its return value is the
    # step's result; a raised exception fails the step (E_TOOL, with its message).
    async def process(job, token):
        tool = TOOLS.get(job.data.get("tool") or job.name)
        if tool is None:
            raise Exception(f"this worker has no tool `{job.name}`")
        return await tool["run"](job.data.get("args") or {})

    worker = Worker(QUEUE, process, {"connection": URL, "concurrency": 4})
    await publish()
    print(f"python worker {worker_id}: serving {', '.join(TOOLS)} on queue `{QUEUE}`", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        try:
            # Refreshed well within the 15 s after which a coordinator takes it for dead.
            await asyncio.wait_for(stop.wait(), timeout=5)
        except asyncio.TimeoutError:
            await publish()
    await redis.hdel("plan:tools", worker_id)
    await worker.close()  # finishes the jobs in hand
    await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
