// A BullMQ worker in Node that serves a tool to plan-cli: `greet`.
//
//   npm install bullmq ioredis
//   REDIS_URL=redis://127.0.0.1:6379 node worker.mjs
//
// It publishes its tools where plan-cli coordinators look (the hash `plan:tools`), so plans
// can name `greet`, and runs the jobs of its own queue (QUEUE, default `node-tools`): a queue of
// its own, because a BullMQ job goes to whichever worker of a queue asks first, and the
// plan-cli workers on `steps` have no `greet`.
import os from 'node:os';
import { Worker } from 'bullmq';
import IORedis from 'ioredis';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const queue = process.env.QUEUE ?? 'node-tools';

// What plan-cli needs to validate a plan, check arguments and gate approvals.
const tools = {
  greet: {
    description: 'Greet someone by name',
    input_schema: {
      type: 'object',
      properties: { name: { type: 'string' } },
      required: ['name'],
    },
    risk: 'low',
    run: async ({ name }) => ({ greeting: `Hello, ${name}!`, by: 'node' }),
  },
};

const connection = new IORedis(url, { maxRetriesPerRequest: null });
const id = `node-${os.hostname()}-${process.pid}`;

async function publish() {
  const entry = {
    queue,
    host: os.hostname(),
    seen_ms: Date.now(),
    tools: Object.entries(tools).map(([name, t]) => ({
      name,
      description: t.description,
      input_schema: t.input_schema,
      risk: t.risk,
    })),
  };
  await connection.hset('plan:tools', id, JSON.stringify(entry));
}

// A job's data: {tool, args, run_id, step_id, attempt, deadline}. Its return value is the
// step's result; a thrown error fails the step (E_TOOL, with the error's message).
const worker = new Worker(
  queue,
  async (job) => {
    const tool = tools[job.data.tool ?? job.name];
    if (!tool) throw new Error(`this worker has no tool \`${job.name}\``);
    return tool.run(job.data.args ?? {});
  },
  { connection, concurrency: 4 },
);

await publish();
// Refreshed well within the 15 s after which a coordinator takes a worker for dead.
const refresh = setInterval(() => publish().catch(() => {}), 5000);
console.error(`node worker ${id}: serving ${Object.keys(tools).join(', ')} on queue \`${queue}\``);

async function stop() {
  clearInterval(refresh);
  await connection.hdel('plan:tools', id);
  await worker.close(); // finishes the jobs in hand
  await connection.quit();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
