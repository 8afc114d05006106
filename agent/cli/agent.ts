// `kinference agent --config FILE`: validate the config, start, drain on SIGTERM.
import { parseArgs } from 'node:util';
import { startAgent } from '../agent.ts';
import { ConfigError, loadConfigFile } from '../config/load.ts';

export async function runAgentCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string', short: 'c' } }, strict: true });
  if (!values.config) {
    console.error('kinference agent: --config FILE is required');
    return 2;
  }
  let settings;
  try {
    settings = loadConfigFile(values.config);
  } catch (error) {
    console.error(error instanceof ConfigError ? `kinference: ${error.message}` : error);
    return 1;
  }
  const agent = await startAgent(settings, { configPath: values.config });
  console.log(`kinference: ready to serve on ${agent.apiUrl}/v1 (admin ${agent.adminUrl})`);
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      console.log(`kinference: ${signal}: draining (up to ${settings.limits.drainTimeoutMs} ms)`);
      agent.shutdown().then(resolve, resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  console.log('kinference: stopped');
  return 0;
}
