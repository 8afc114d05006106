// The documentation holds together: every relative link in README.md and docs/**/*.md points at a
// file (and, for `page.md#anchor`, a heading) in this tree, and nothing in the repository cites
// files that live outside it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function walk(dir: string, keep: (path: string) => boolean): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      return entry.name === 'node_modules' || entry.name === 'dist' || entry.name.startsWith('.')
        ? []
        : walk(path, keep);
    }
    return keep(path) ? [path] : [];
  });
}

const docs = [join(ROOT, 'README.md'), ...walk(join(ROOT, 'docs'), (p) => p.endsWith('.md'))];

/** Links and images, `[text](target)`, outside fenced and inline code. */
function markdownLinks(markdown: string): string[] {
  const prose = markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!);
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const counts = new Map<string, number>();
  const prose = markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, '');
  for (const [, heading] of prose.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = heading!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const seen = counts.get(base) ?? 0;
    counts.set(base, seen + 1);
    anchors.add(seen === 0 ? base : `${base}-${seen}`);
  }
  return anchors;
}

function brokenLinks(file: string, text = readFileSync(file, 'utf8')): string[] {
  const broken: string[] = [];
  for (const link of markdownLinks(text)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // https:, mailto: — not ours to check offline
    const [path, anchor] = link.split('#', 2) as [string, string | undefined];
    const target = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
    const where = `${relative(ROOT, file)}: ${link}`;
    if (!target.startsWith(ROOT + '/') && target !== ROOT) broken.push(`${where} (outside the repository)`);
    else if (!existsSync(target)) broken.push(`${where} (no such file)`);
    else if (anchor && target.endsWith('.md') && !headingAnchors(readFileSync(target, 'utf8')).has(anchor)) {
      broken.push(`${where} (no such heading)`);
    }
  }
  return broken;
}

test('every relative link in README.md and docs/ resolves to a file and heading in the tree', () => {
  assert.ok(docs.length > 5, `found only ${docs.length} pages`);
  assert.deepEqual(
    docs.flatMap((file) => brokenLinks(file)),
    [],
  );
});

test('the link check catches a missing file, a missing heading and a path out of the tree', () => {
  assert.deepEqual(markdownLinks('[a](x.md) `[b](y.md)` ![c](img.png "t")\n```\n[d](z.md)\n```\n'), [
    'x.md',
    'img.png',
  ]);
  assert.ok(headingAnchors('## What `kinference explain` prints\n').has('what-kinference-explain-prints'));
  assert.ok(headingAnchors('## A\n## A\n').has('a-1'));
  const page = join(ROOT, 'docs', 'page-under-test.md');
  const text =
    '[ok](api.md#admin-listener) [x](missing.md) [y](api.md#no-such-heading) [z](../../outside.md) [w](https://example.com)';
  assert.deepEqual(brokenLinks(page, text), [
    'docs/page-under-test.md: missing.md (no such file)',
    'docs/page-under-test.md: api.md#no-such-heading (no such heading)',
    'docs/page-under-test.md: ../../outside.md (outside the repository)',
  ]);
});

test('nothing in the repository cites files that are not in it', () => {
  const outside = ['CONTRACT', 'REFERENCE', 'DESIGN', 'STYLE']
    .map((name) => `${name}.md`)
    .concat(['/work/' + 'shared']);
  const textFiles = [
    ...walk(
      ROOT,
      (p) => /\.(ts|js|cjs|mjs|json|md|ya?ml|sh|proto)$|Dockerfile$/.test(p) && !p.endsWith('package-lock.json'),
    ),
    ...walk(join(ROOT, '.ci'), () => true),
  ];
  const citing = textFiles.flatMap((file) => {
    const text = readFileSync(file, 'utf8');
    return outside.filter((name) => text.includes(name)).map((name) => `${relative(ROOT, file)}: ${name}`);
  });
  assert.deepEqual(citing, []);
});
