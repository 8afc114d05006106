// The data boundary in numbers: for each family of forms a sensitive value takes (headers, seams,
// scripts, invisibles, escapes, encodings), the share of generated requests the classifier tags,
// and the share of their clean twins it leaves alone; then the false-positive rate on the
// ordinary-prompt corpus (test/fixtures/ordinary-prompts.ts), alone and as consecutive messages.
//   node bench/boundary.ts [instances per family, default 1000]
import { classifyRequest } from '../agent/classify/classify.ts';
import { propagatedHeaders, requestIdFor } from '../agent/forward/headers.ts';
import { FAMILIES, UNPROMISED, samples, type Sample } from '../test/fixtures/canaries.ts';
import { ORDINARY_PROMPTS } from '../test/fixtures/ordinary-prompts.ts';

const count = Number(process.argv[2] ?? 1000);

/** Tags as the request path computes them: the body, and the header values it would forward. */
function tagsOf(sample: Sample): string[] {
  const client = { get: (name: string) => sample.headers[name] ?? null };
  const forwarded = propagatedHeaders(
    client,
    requestIdFor(client.get('x-request-id'), () => 'generated-id'),
  );
  return classifyRequest(null, sample.body, { headers: forwarded }).tags;
}

const pct = (n: number, of: number) => `${((100 * n) / of).toFixed(n === 0 || n === of ? 0 : 2)}%`;
console.log(`node ${process.version}, ${count} instances per family (seeded)\n`);
console.log('| family | promise | caught | clean twins tagged |');
console.log('| --- | --- | --- | --- |');
for (const [i, family] of FAMILIES.entries()) {
  let caught = 0;
  let twins = 0;
  for (const { leaky, clean } of samples(family, count, 1000 * (i + 1))) {
    // A family whose header never leaves is not tagged: the header is dropped instead.
    if (family.promise === 'kept' && tagsOf(leaky).includes('pii')) caught++;
    if (tagsOf(clean).includes('pii')) twins++;
  }
  const promise = family.promise === 'kept' ? 'kept home' : 'header not forwarded';
  console.log(
    `| ${family.name} | ${promise} | ${family.promise === 'kept' ? pct(caught, count) : 'n/a'} | ${pct(twins, count)} |`,
  );
}
for (const [i, family] of UNPROMISED.entries()) {
  let caught = 0;
  for (const { leaky } of samples(family, count, 90_000 + 1000 * i)) if (tagsOf(leaky).includes('pii')) caught++;
  console.log(`| ${family.name} | not promised | ${pct(caught, count)} | |`);
}

const tagged = (text: string) =>
  tagsOf({ kind: 'chat', body: { messages: [{ role: 'user', content: text }] }, headers: {} }).length > 0;
const flagged = ORDINARY_PROMPTS.filter(tagged);
// Seams: each prompt followed by the next as two messages; a pair counts only when neither
// prompt is tagged alone, so this is what reading across the boundary adds.
let pairs = 0;
let seamOnly = 0;
for (let i = 0; i + 1 < ORDINARY_PROMPTS.length; i++) {
  const [a, b] = [ORDINARY_PROMPTS[i], ORDINARY_PROMPTS[i + 1]];
  if (tagged(a) || tagged(b)) continue;
  pairs++;
  const body = {
    messages: [
      { role: 'user', content: a },
      { role: 'user', content: b },
    ],
  };
  if (tagsOf({ kind: 'chat', body, headers: {} }).length > 0) seamOnly++;
}
console.log(
  `\nordinary prompts: ${flagged.length} of ${ORDINARY_PROMPTS.length} tagged (${pct(flagged.length, ORDINARY_PROMPTS.length)})`,
);
console.log(
  `untagged consecutive pairs tagged when sent as two messages: ${seamOnly} of ${pairs} (${pct(seamOnly, pairs)})`,
);
for (const text of flagged) console.log(`  tagged: ${JSON.stringify(text)}`);
