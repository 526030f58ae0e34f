// A dashboard of the queue `steps` (and the queues of other workers) with Bull Board:
// jobs waiting, active, completed and failed, each job's data and result.
//
//   npm install bullmq ioredis @bull-board/api @bull-board/express express
//   REDIS_URL=redis://127.0.0.1:6379 QUEUES=steps,node-tools node dashboard.mjs
//   # then open http://localhost:3000/
import express from 'express';
import IORedis from 'ioredis';
import { Queue } from 'bullmq';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const names = (process.env.QUEUES ?? 'steps').split(',');
const port = Number(process.env.PORT ?? 3000);

const connection = new IORedis(url, { maxRetriesPerRequest: null });
const serverAdapter = new ExpressAdapter();
serverAdapter.setBasePath('/');
createBullBoard({
  queues: names.map((name) => new BullMQAdapter(new Queue(name, { connection }), { readOnlyMode: true })),
  serverAdapter,
});
const app = express();
app.use('/', serverAdapter.getRouter());
app.listen(port, () => console.error(`dashboard of ${names.join(', ')} on http://localhost:${port}/`));
