// `kinference agent` in a child process, the way an operator runs it.
import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';

const MAIN = new URL('../../agent/cli/main.ts', import.meta.url).pathname;

export interface AgentProcess {
  child: ChildProcess;
  api: string;
  admin: string;
  output: () => string;
  exited: Promise<number | null>;
}

/** How to start node: flags for node itself (V8 flags such as the image's, which NODE_OPTIONS does
 *  not always accept) and the entry module (default: the TypeScript sources; the image runs dist/). */
export interface Launch {
  nodeFlags?: readonly string[];
  main?: string;
  /** How long it may take to say where it serves (default 10 s). */
  startTimeoutMs?: number;
}

/** Starts an agent on `configPath` and resolves once it says where it serves. */
export function runAgent(
  configPath: string,
  env: NodeJS.ProcessEnv = process.env,
  { nodeFlags = [], main = MAIN, startTimeoutMs = 10_000 }: Launch = {},
): Promise<AgentProcess> {
  const child = spawn(process.execPath, [...nodeFlags, main, 'agent', '--config', configPath], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env,
  });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // Nobody gets a handle on a process that did not start: end it, or it holds the test run open.
      child.kill('SIGKILL');
      reject(new Error(`agent did not start:\n${output}`));
    }, startTimeoutMs);
    const onData = () => {
      const match = /ready to serve on (http:\/\/[\d.:]+)\/v1 \(admin (http:\/\/[\d.:]+)\)/.exec(output);
      if (!match) return;
      clearTimeout(timer);
      child.stdout!.off('data', onData);
      resolve({ child, api: match[1], admin: match[2], output: () => output, exited });
    };
    child.stdout!.on('data', onData);
    void exited.then((code) => reject(new Error(`agent exited ${code}:\n${output}`)));
  });
}

export async function stopAgent(agent: AgentProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
  if (agent.child.exitCode === null) agent.child.kill(signal);
  return agent.exited;
}

/** A UDP port free right now on 127.0.0.1 (gossip peers must know each other's ports up front). */
export async function freeUdpPort(): Promise<number> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}
