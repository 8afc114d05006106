// Writes the InferencePolicy CRD rendered from agent/policy/schema.ts: `npx node agent/policy/render-crd.ts`.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CRD_FILE, renderCrdYaml } from './crd.ts';

const target = fileURLToPath(new URL(`../../${CRD_FILE}`, import.meta.url));
writeFileSync(target, renderCrdYaml());
console.log(`wrote ${CRD_FILE}`);
