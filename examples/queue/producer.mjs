// A BullMQ producer in Node: adds a job to the queue `steps` and waits for its result, which a
// `plan-cli worker` (or any worker of that queue) computes.
//
//   npm install bullmq ioredis
//   REDIS_URL=redis://127.0.0.1:6379 node producer.mjs
import { Queue, QueueEvents } from 'bullmq';
import IORedis from 'ioredis';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const connections = [0, 1].map(() => new IORedis(url, { maxRetriesPerRequest: null }));

const queue = new Queue('steps', { connection: connections[0] });
const events = new QueueEvents('steps', { connection: connections[1] });
await events.waitUntilReady();

// The job's name is the tool; its data says what to call with what.
const job = await queue.add('echo', { tool: 'echo', args: { hello: 'from node' } });
const result = await job.waitUntilFinished(events, 30_000);
console.log(JSON.stringify(result));

await events.close();
await queue.close();
// Connections passed in are the caller's to close.
await Promise.all(connections.map((c) => c.quit()));
