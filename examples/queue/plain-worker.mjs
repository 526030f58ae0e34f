// A BullMQ worker in Node written from BullMQ's documentation alone: it publishes nothing to
// plan-cli. A plan declares its tool (`tools:` with the queue `images`), and plan-cli sends
// each call of it here as a job named after the tool, with data
// `{tool, args, run_id, step_id, attempt, deadline}`. What it returns is the call's result;
// what it throws fails the call; `job.updateProgress` is the call's `tool.progress`.
//
//   npm install bullmq
//   REDIS_URL=redis://127.0.0.1:6379 node plain-worker.mjs
import { Worker } from 'bullmq';

const url = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const connection = { host: url.hostname, port: Number(url.port || 6379) };

const worker = new Worker(
  'images',
  async (job) => {
    const { path, width } = job.data.args;
    await job.updateProgress({ progress: 1, total: 2, message: `reading ${path}` });
    await job.updateProgress({ progress: 2, total: 2, message: `resized to ${width}` });
    return { path: path.replace(/(\.\w+)$/, `-${width}$1`), width, by: 'node' };
  },
  { connection },
);
await worker.waitUntilReady();
console.error('node worker ready on queue images');

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, async () => {
    await worker.close();
    process.exit(0);
  });
}
