// `npm test`: every test file under test/, on the pinned Node (npm puts node_modules/.bin first).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

function findTests(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'fixtures' ? [] : findTests(path);
    return entry.name.endsWith('.test.ts') ? [path] : [];
  });
}

const files = process.argv.length > 2 ? process.argv.slice(2) : findTests('test').sort();
console.log(`node ${process.version}, ${files.length} test files`);
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=2', '--test-timeout=120000', ...files], {
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
