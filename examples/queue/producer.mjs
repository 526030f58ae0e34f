// A BullMQ producer in Node: adds a job to the queue `steps` and waits for its result, which a
// `plan-cli worker` (or any worker of that queue) computes.
//
//   npm install bullmq ioredis
//   REDIS_URL=redis://127.0.0.1:6379 node producer.mjs
import { createHmac, randomUUID } from 'node:crypto';
import { Queue, QueueEvents } from 'bullmq';
import IORedis from 'ioredis';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const connections = [0, 1].map(() => new IORedis(url, { maxRetriesPerRequest: null }));

const queue = new Queue('steps', { connection: connections[0] });
// From the stream's start: a job a worker finishes before the listener's first read would
// otherwise be missed (its event gone by, `waitUntilFinished` left waiting for good).
const events = new QueueEvents('steps', { connection: connections[1], lastEventId: '0-0' });
await events.waitUntilReady();

// The job's name is the tool; its data says what to call with what.
const data = { tool: 'echo', args: { hello: 'from node' } };
const jobId = randomUUID();
// Workers started with PLAN_QUEUE_SECRET run only jobs signed with it: HMAC-SHA-256 over the
// job's name, its id and its data as canonical JSON (keys sorted, no spaces), joined by "\n".
const secret = process.env.PLAN_QUEUE_SECRET;
if (secret) {
  data.signature = createHmac('sha256', secret)
    .update(['echo', jobId, canonical(data)].join('\n'))
    .digest('hex');
}
const job = await queue.add('echo', data, { jobId });
const result = await job.waitUntilFinished(events, 30_000);
console.log(JSON.stringify(result));

await events.close();
await queue.close();
// Connections passed in are the caller's to close.
await Promise.all(connections.map((c) => c.quit()));

// JSON with object keys sorted at every depth and no spaces: the bytes plan-cli signs.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}
