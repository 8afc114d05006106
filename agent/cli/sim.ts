// `kinference sim`: one simulated model server, until SIGINT or SIGTERM.

import { parseArgs } from 'node:util';
import type { Flavor } from '../../shared/sim/buckets.ts';
import { startSim } from '../../shared/sim/server.ts';

const USAGE = `usage: kinference sim [--port P] [--host H] [--engine vllm|tgi|sglang] [--max-seqs N]
                      [--max-queue N] [--speed X] [--model NAME]... [--seed N] [--name POD]
                      [--lora-module NAME]... [--max-loras N] [--lora-load-ms MS]

Runs one simulated model server (vLLM wire format, continuous batching, realistic latency).
  --port        listen port (default 8000; 0 = any free port)
  --host        listen address (default 127.0.0.1)
  --engine      whose /metrics to imitate (default vllm)
  --max-seqs    requests in the running batch (default 16)
  --max-queue   requests allowed to wait before 429 (default 512)
  --speed       throughput multiplier; 0.5 = twice as slow (default 1)
  --model       served model name, repeatable (default llama-3-8b)
  --seed        seed for jitter and output lengths (default 1)
  --name        pod name, echoed in an x-sim-pod response header
  --lora-module LoRA adapter served on the first model, repeatable (needs --max-loras)
  --max-loras   adapters one batch may run (GPU adapter slots; default 4 with adapters)
  --lora-load-ms time to load an adapter into a slot (default 40)`;

const FLAVORS: readonly Flavor[] = ['vllm', 'tgi', 'sglang'];

export async function runSimCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: 'string', default: '8000' },
      host: { type: 'string', default: '127.0.0.1' },
      engine: { type: 'string', default: 'vllm' },
      'max-seqs': { type: 'string' },
      'max-queue': { type: 'string' },
      speed: { type: 'string' },
      model: { type: 'string', multiple: true },
      seed: { type: 'string' },
      name: { type: 'string' },
      'lora-module': { type: 'string', multiple: true },
      'max-loras': { type: 'string' },
      'lora-load-ms': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const engine = values.engine as Flavor;
  if (!FLAVORS.includes(engine)) throw new Error(`--engine must be one of ${FLAVORS.join(', ')}\n\n${USAGE}`);

  const sim = await startSim({
    port: integer(values.port, '--port', 0),
    host: values.host,
    engine,
    maxSeqs: optionalInteger(values['max-seqs'], '--max-seqs', 1),
    maxQueue: optionalInteger(values['max-queue'], '--max-queue', 0),
    speed: values.speed === undefined ? undefined : positiveNumber(values.speed, '--speed'),
    models: values.model,
    seed: optionalInteger(values.seed, '--seed', 0),
    name: values.name,
    adapters: values['lora-module'],
    maxLoras: optionalInteger(values['max-loras'], '--max-loras', 1) ?? (values['lora-module'] ? 4 : undefined),
    loraLoadMs: optionalInteger(values['lora-load-ms'], '--lora-load-ms', 0),
  });
  console.log(`kinference sim (${engine}) serving ${(values.model ?? ['llama-3-8b']).join(', ')} at ${sim.url}`);

  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await sim.close();
}

function integer(text: string, flag: string, min: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) throw new Error(`${flag} must be an integer of at least ${min}, got "${text}"`);
  return n;
}

function optionalInteger(text: string | undefined, flag: string, min: number): number | undefined {
  return text === undefined ? undefined : integer(text, flag, min);
}

function positiveNumber(text: string, flag: string): number {
  const n = Number(text);
  if (!(n > 0) || !Number.isFinite(n)) throw new Error(`${flag} must be a positive number, got "${text}"`);
  return n;
}
