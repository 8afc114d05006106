// The discovery the settings name: Kubernetes informers, or the config file (watched for
// changes when its path is known). The Kubernetes client is loaded only when asked for.
import type { Counter } from 'prom-client';
import type { AgentSettings } from '../config/load.ts';
import { parseHostPort } from '../gossip/node.ts';
import { createStaticDiscovery } from './static.ts';
import type { Discovery } from './types.ts';

export interface DiscoveryDeps {
  /** Static mode: watch this config file for policy and pod changes. */
  configPath?: string;
  /** kinference_policy_reloads_total{outcome}: each change of the watched file. */
  reloads: Pick<Counter<'outcome'>, 'inc'>;
  log(level: 'info' | 'warn', message: string): void;
}

export async function discoveryFor(settings: AgentSettings, deps: DiscoveryDeps): Promise<Discovery> {
  const { log } = deps;
  if (settings.discovery === 'kubernetes') {
    const { createKubernetesDiscovery } = await import('./kubernetes.ts');
    return createKubernetesDiscovery({
      nodeName: settings.node,
      ...settings.kubernetes,
      gossipPort: settings.gossip ? parseHostPort(settings.gossip.bind).port : undefined,
      log: (level: 'info' | 'warn', message: string) => log(level, message),
    });
  }
  return createStaticDiscovery({
    settings,
    configPath: deps.configPath,
    onReload: (outcome, detail) => {
      deps.reloads.inc({ outcome });
      if (outcome === 'ok') log('info', 'config reloaded');
      else log('warn', `config change rejected, keeping the previous one: ${detail}`);
    },
  });
}
