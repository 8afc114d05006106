// A model-server pod as the scraper tests give it: one per name, at a test server's address.
import type { Pod } from '../../agent/types.ts';

export const scrapedPod = (name: string, address: string, engine?: Pod['engine']): Pod => ({
  uid: `inference/${name}`,
  name,
  namespace: 'inference',
  node: 'node-a',
  address,
  models: ['m'],
  ...(engine ? { engine } : {}),
});
