import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { parsePromText, PromTextReader } from '../agent/telemetry/promtext.ts';
import { ADAPTERS } from '../agent/telemetry/adapters.ts';
import { MetricSelector, parseFloatToken, type MetricPage } from '../agent/telemetry/metric-page.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/metrics/${name}`, import.meta.url), 'utf8');

test('reads a full vLLM page with two engines, keeping _created families apart from their counters', () => {
  const page = parsePromText(fixture('vllm-v1-two-engines.txt'));
  assert.equal(page.errors, 0, JSON.stringify(page.diagnostics));
  assert.equal(page.sum('vllm:num_requests_waiting'), 7);
  assert.equal(page.sum('vllm:num_requests_running'), 21);
  assert.equal(page.first('vllm:num_requests_waiting', { engine: '1' })?.value, 4);
  assert.equal(page.sum('vllm:prompt_tokens_total'), 1_234_567 + 987_654);
  assert.equal(page.series('vllm:prompt_tokens_created').length, 2);
  assert.equal(page.sum('vllm:request_success_total', { finished_reason: 'stop' }), 1600);
  assert.equal(page.type('vllm:time_to_first_token_seconds'), 'histogram');
  assert.equal(page.type('vllm:prompt_tokens_total'), 'counter');
  assert.equal(page.type('vllm:prompt_tokens_created'), 'gauge');
  assert.equal(page.sum('python_gc_collections_total'), 1622 + 147 + 9);
  assert.equal(page.first('process_virtual_memory_bytes')?.value, 5.3125470208e10);
  // lora_requests_info keeps stale label sets; commas inside a value are part of it.
  const lora = page.series('vllm:lora_requests_info');
  assert.equal(lora.length, 2);
  assert.equal(lora[1].labels.running_lora_adapters, 'sql-lora,chat-lora');
  assert.equal(page.max('vllm:lora_requests_info'), 1.7519025567e9);
});

test('reads only the samples a selector asks for', () => {
  const select = new MetricSelector([
    'vllm:num_requests_waiting',
    'vllm:time_to_first_token_seconds_sum',
    'vllm:time_to_first_token_seconds_count',
  ]);
  const page = parsePromText(fixture('vllm-v1-two-engines.txt'), select);
  assert.deepEqual([...page.names()].sort(), [
    'vllm:num_requests_waiting',
    'vllm:time_to_first_token_seconds_count',
    'vllm:time_to_first_token_seconds_sum',
  ]);
  assert.deepEqual(page.histogram('vllm:time_to_first_token_seconds'), { sum: 71.25 + 55.5, count: 843 + 693 });
  assert.equal(page.type('vllm:time_to_first_token_seconds'), 'histogram');
  assert.equal(page.type('python_info'), undefined);
  assert.equal(page.errors, 0);
});

test('selects by prefix', () => {
  const page = parsePromText(fixture('vllm-v1-two-engines.txt'), new MetricSelector([], ['process_']));
  assert.deepEqual(
    [...page.names()],
    [
      'process_virtual_memory_bytes',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'process_cpu_seconds_total',
      'process_open_fds',
      'process_max_fds',
    ],
  );
});

test('reads escaped and unusual label values, odd spacing and a trailing comma', () => {
  const page = parsePromText(fixture('edge-cases.txt'));
  assert.equal(page.errors, 0, JSON.stringify(page.diagnostics));
  const [escaped, odd, trailing, spaced] = page.series('edge_escaped');
  assert.deepEqual({ ...escaped.labels }, { path: 'C:\\models\\llama', quote: 'say "hi"', newline: 'a\nb' });
  assert.deepEqual({ ...odd.labels }, { odd: 'x, y} = z', spaces: '  padded  ', utf8: '日本語 ✓ ünïcødé' });
  assert.deepEqual({ ...trailing.labels }, { trailing: 'comma' });
  assert.deepEqual({ ...spaced.labels }, { spaced: 'out' });
  assert.equal(spaced.value, 4);
});

test('reads NaN, ±Inf, exponents, timestamps, and a last line without a newline', () => {
  const page = parsePromText(fixture('edge-cases.txt'));
  const value = (v: string) => page.first('edge_values', { v })?.value;
  assert.ok(Number.isNaN(value('nan')));
  assert.equal(value('pinf'), Infinity);
  assert.equal(value('ninf'), -Infinity);
  assert.equal(value('exp'), 1.7e9);
  assert.equal(value('neg'), -0.0005);
  assert.equal(value('int'), 42);
  assert.deepEqual(
    page.series('edge_timestamped_total').map((s) => [s.value, s.timestamp]),
    [
      [7, 1751902400000],
      [8, 1751902400001],
    ],
  );
  assert.equal(page.first('edge_last_line_without_newline')?.value, 9);
});

test('reads a histogram whose _bucket, _sum and _count come in any order', () => {
  const page = parsePromText(fixture('edge-cases.txt'));
  assert.deepEqual(page.histogram('edge_histogram'), {
    sum: 2.5,
    count: 4,
    buckets: [
      { le: 0.5, count: 1 },
      { le: 1, count: 3 },
      { le: Infinity, count: 4 },
    ],
  });
});

test('CRLF line endings read the same as LF', () => {
  const lf = fixture('edge-cases.txt');
  const a = parsePromText(lf);
  const b = parsePromText(lf.replace(/\n/g, '\r\n'));
  assert.equal(b.errors, 0, JSON.stringify(b.diagnostics));
  assert.deepEqual([...b.names()], [...a.names()]);
  for (const name of a.names()) assert.deepEqual(b.series(name), a.series(name));
});

test('reads OpenMetrics: # EOF, # UNIT, counters typed without _total, exemplars, timestamps in seconds', () => {
  const page = parsePromText(fixture('vllm-openmetrics.txt'));
  assert.equal(page.errors, 0, JSON.stringify(page.diagnostics));
  assert.equal(page.eof, true);
  assert.equal(page.type('vllm:prompt_tokens'), 'counter');
  assert.equal(page.sum('vllm:prompt_tokens_total'), 4096);
  assert.equal(page.first('vllm:num_requests_waiting')?.timestamp, 1751902400.123);
  assert.deepEqual(
    page.series('vllm:time_to_first_token_seconds_bucket').map((s) => s.value),
    [20, 29, 30],
  );
  assert.equal(page.first('vllm:time_to_first_token_seconds_bucket')?.timestamp, undefined); // the exemplar's, not ours
});

test('counts text after # EOF as an error', () => {
  const page = parsePromText('a 1\n# EOF\nb 2\n');
  assert.equal(page.errors, 1);
  assert.equal(page.has('b'), false);
  assert.equal(parsePromText('a 1\n# EOF\n').errors, 0);
});

test('each malformed line is skipped and counted, and the rest of the page still reads', () => {
  const bad = [
    'm{a="b" 1',
    'm{a=b} 1',
    'm{a="b"',
    'm{="x"} 1',
    'm{a="x\\',
    'm 1 2 3',
    'm abc',
    'm',
    'm{a="1"}',
    '1m 1',
    'm-x 1',
    'm 1 notatime',
    'm{a="b"c="d"} 1',
    'm{a."b"="c"} 1',
    '# TYPE m',
    '# TYPE m sideways',
  ];
  for (const line of bad) {
    const page = parsePromText(`good 1\n${line}\ngood 2\n`);
    assert.equal(page.errors, 1, `"${line}" should be one error, got ${JSON.stringify(page.diagnostics)}`);
    assert.equal(page.diagnostics[0].line, 2);
    assert.deepEqual(
      page.series('good').map((s) => s.value),
      [1, 2],
      line,
    );
    assert.equal(page.has('m'), false, line);
  }
});

test('keeps at most five diagnostics but counts every error', () => {
  const page = parsePromText(Array.from({ length: 50 }, () => 'x{').join('\n'));
  assert.equal(page.errors, 50);
  assert.equal(page.diagnostics.length, 5);
});

test('never throws on random bytes, and reports them', () => {
  let seed = 42;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  let reported = 0;
  for (let round = 0; round < 300; round++) {
    const bytes = Buffer.alloc(1 + Math.floor(random() * 2000));
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
    const page = parsePromText(bytes.toString('utf8'));
    if (page.errors > 0) reported++;
  }
  assert.ok(reported > 290, `only ${reported} of 300 garbage pages reported errors`);
});

test('never throws on a page truncated at any point, and keeps the series before the cut', () => {
  const text = fixture('vllm-v1-two-engines.txt');
  const select = new MetricSelector(['vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc']);
  const full = parsePromText(text, select);
  for (let cut = 0; cut <= text.length; cut += 7) {
    const page = parsePromText(text.slice(0, cut), select);
    assert.ok(page.series('vllm:num_requests_waiting').length <= 2);
    if (cut > text.indexOf('vllm:gpu_cache_usage_perc')) {
      assert.deepEqual(page.series('vllm:num_requests_waiting'), full.series('vllm:num_requests_waiting'));
    }
  }
  // Cut inside a wanted label value: one error, not a wrong series.
  const midLabel = text.indexOf('vllm:kv_cache_usage_perc{engine="1') + 'vllm:kv_cache_usage_perc{engine="'.length;
  const page = parsePromText(text.slice(0, midLabel), select);
  assert.equal(page.errors, 1);
  assert.equal(page.series('vllm:kv_cache_usage_perc').length, 1);
});

test('reads a huge label value', () => {
  const huge = 'x'.repeat(1_000_000);
  const page = parsePromText(`# TYPE big gauge\nbig{v="${huge}",w="\\"${huge}"} 1\nsmall 2\n`);
  assert.equal(page.errors, 0);
  assert.equal(page.first('big')?.labels.v.length, 1_000_000);
  assert.equal(page.first('big')?.labels.w.length, 1_000_001);
  assert.equal(page.first('small')?.value, 2);
});

test('an empty page is valid and empty', () => {
  for (const text of ['', '\n', '\r\n\r\n', '   \n\t\n', '# just a comment']) {
    const page = parsePromText(text);
    assert.equal(page.errors, 0);
    assert.deepEqual([...page.names()], []);
  }
});

test('sum and friends tell absent from zero', () => {
  const page = parsePromText('zero 0\n');
  assert.equal(page.sum('zero'), 0);
  assert.equal(page.sum('absent'), undefined);
  assert.equal(page.mean('absent'), undefined);
  assert.equal(page.histogram('absent'), undefined);
  assert.equal(
    page.sum('zero', (labels) => labels.x === 'y'),
    undefined,
  );
});

test('parses Go float syntax', () => {
  assert.equal(parseFloatToken('1.7e+09'), 1.7e9);
  assert.equal(parseFloatToken('+Inf'), Infinity);
  assert.equal(parseFloatToken('-inf'), -Infinity);
  assert.ok(Number.isNaN(parseFloatToken('NaN') as number));
  assert.equal(parseFloatToken('-0'), -0);
  assert.equal(parseFloatToken(''), undefined);
  assert.equal(parseFloatToken('1e'), undefined);
  assert.equal(parseFloatToken('one'), undefined);
});

/** Everything a page holds, comparable with deepEqual. */
function pageContent(page: MetricPage) {
  const names = [...page.names()];
  return {
    series: names.map((n) => [n, page.series(n)]),
    types: names.map((n) => page.type(n.replace(/_(sum|count|bucket|total|created)$/, ''))),
    errors: page.errors,
    diagnostics: page.diagnostics,
    lines: page.lines,
    eof: page.eof,
  };
}

function readInChunks(bytes: Buffer, size: number, select?: MetricSelector): MetricPage {
  const reader = new PromTextReader(select);
  for (let at = 0; at < bytes.length; at += size) reader.write(bytes.subarray(at, at + size));
  return reader.end();
}

const realPages = new URL('./fixtures/model-server-metrics/', import.meta.url);

test('a page read chunk by chunk as it arrives equals the page read whole, wherever the chunks cut it', () => {
  const files = readdirSync(realPages).filter((f) => f.endsWith('.txt'));
  assert.ok(files.length >= 10);
  const pages = [
    ...files.map((f) => readFileSync(new URL(f, realPages))),
    Buffer.from(fixture('edge-cases.txt')),
    Buffer.from(fixture('vllm-openmetrics.txt')),
    Buffer.from('a 1\r\nb{x="y"} 2\r\n# EOF\r\n'),
    Buffer.from('a 1\n# EOF\nb 2\n'),
  ];
  for (const bytes of pages) {
    const whole = pageContent(parsePromText(bytes.toString('utf8')));
    for (const size of [1, 3, 64, 1000, 65_536]) {
      assert.deepEqual(pageContent(readInChunks(bytes, size)), whole, `chunks of ${size}`);
    }
    const select = MetricSelector.union(ADAPTERS.vllm.selector, ADAPTERS.tgi.selector, ADAPTERS.sglang.selector);
    assert.deepEqual(
      pageContent(readInChunks(bytes, 7, select)),
      pageContent(parsePromText(bytes.toString('utf8'), select)),
    );
  }
});

test('a label value in UTF-8 reads whole even when a chunk boundary cuts one of its characters', () => {
  const bytes = Buffer.from('m{model="naïve 模型 \\"q\\" ✓"} 1\nn{a="é"} 2');
  for (const size of [1, 2, 5]) {
    const page = readInChunks(bytes, size);
    assert.equal(page.first('m')?.labels.model, 'naïve 模型 "q" ✓', `chunks of ${size}`);
    assert.equal(page.first('n')?.labels.a, 'é');
    assert.equal(page.errors, 0);
  }
});

test('lines the selector does not want are skipped in the bytes exactly as the text reader would judge them', () => {
  const select = new MetricSelector(['want', 'want_sum', 'vllm:num_requests_waiting']);
  const page = [
    '# HELP want A wanted family.',
    '# TYPE want summary',
    '# TYPE other gauge',
    '#TYPE other2 counter',
    '#\tHELP\tx tabs',
    '# HELP',
    '# HELPER not help',
    '# TYPE lonely',
    '# TYPE other3 ',
    '# TYPE other4 sideways',
    '# TYPE want sideways',
    '# UNIT other seconds',
    '# just a comment',
    'other{a="b"} 1',
    'other 2',
    'other\t3',
    'other{a="b" 1',
    'other',
    'other-x 1',
    '1other 1',
    ' other 1',
    'othér 1',
    'want_sum{quantile="x"} 4',
    'want_sum 5 1700000000000',
    'want_count 6',
    'vllm:num_requests_waiting{model_name="naïve"} 7',
    'other_bucket{le="+Inf"} 9\r',
    '# TYPE other5 gauge\r',
    '# TYPE other6\r',
    '# TYPE other7 \r',
    'other 1 2 3',
    '',
  ].join('\n');
  const bytes = Buffer.from(page, 'utf8');
  const whole = parsePromText(page, select);
  assert.ok(whole.errors >= 8, 'the page holds errors in unwanted lines, which must still count');
  const content = (p: MetricPage) => ({
    ...pageContent(p),
    types: ['want', 'other', 'other2', 'other3', 'other4', 'other5', 'lonely'].map((f) => p.type(f)),
  });
  for (let size = 1; size <= bytes.length; size++) {
    assert.deepEqual(content(readInChunks(bytes, size, select)), content(whole), `chunks of ${size}`);
  }
});

test('a run of lines with the name of the line before is judged line by line, wherever a chunk cuts it', () => {
  // The reader compares each line with the last skipped name; a longer or shorter name, a name
  // char, a missing value or a wanted name sharing the bytes must still be read as the text reader does.
  const select = new MetricSelector(['fam_bucket_sum', 'fam_bucketx', 'want']);
  const long = 'x'.repeat(90);
  const page = [
    'fam_bucket{le="1"} 1',
    'fam_bucket{le="2"} 2',
    `fam_bucket{le="3",long="${long}"} 3`,
    'fam_bucket 4',
    'fam_bucket\t5',
    'fam_bucketx{le="4"} 6',
    'fam_bucket_sum 7',
    'fam_bucket',
    'fam_bucket-x 1',
    'fam_bucke 1',
    'fam_bucket{le="5"} 8\r',
    'fam_bucket{le="6"',
    'fam_bucket{le="7"} 9',
    'want 10',
    'fam_bucket{le="8"} 11',
    'fam_bucket',
  ].join('\n');
  const bytes = Buffer.from(page, 'utf8');
  const whole = pageContent(parsePromText(page, select));
  assert.ok(whole.errors >= 2, JSON.stringify(whole.diagnostics));
  assert.deepEqual(
    whole.series.map(([n]) => n),
    ['fam_bucketx', 'fam_bucket_sum', 'want'],
  );
  for (let size = 1; size <= bytes.length; size++) {
    assert.deepEqual(pageContent(readInChunks(bytes, size, select)), whole, `chunks of ${size}`);
  }
  // Chunks at every offset of a buffer shared with other bytes (views into one larger ArrayBuffer).
  const shared = Buffer.concat([Buffer.from('\n\n\n'), bytes, Buffer.from('fam_bucket 1\n')]);
  for (let size = 1; size <= bytes.length; size += 7) {
    const reader = new PromTextReader(select);
    for (let at = 3; at < 3 + bytes.length; at += size)
      reader.write(shared.subarray(at, Math.min(at + size, 3 + bytes.length)));
    assert.deepEqual(pageContent(reader.end()), whole, `views of ${size}`);
  }
});

test('real pages read in chunks through each engine adapter’s selector equal the page read whole', () => {
  for (const file of readdirSync(realPages).filter((f) => f.endsWith('.txt'))) {
    const bytes = readFileSync(new URL(file, realPages));
    for (const adapter of Object.values(ADAPTERS)) {
      const whole = pageContent(parsePromText(bytes.toString('utf8'), adapter.selector));
      for (const size of [1, 2, 13, 100, 4096, 65_536]) {
        assert.deepEqual(pageContent(readInChunks(bytes, size, adapter.selector)), whole, `${file}, chunks of ${size}`);
      }
    }
  }
});

test('a selector that keeps some labels reads the same series, values and verdicts, with only those labels', () => {
  const names = ADAPTERS.vllm.selector.names().concat(ADAPTERS.sglang.selector.names(), ['m', 'good']);
  const keep = ['num_gpu_blocks', 'block_size', 'tp_rank', 'dp_rank', 'a'];
  const all = new MetricSelector(names);
  const some = new MetricSelector(names, [], keep);
  const malformed = [
    'good{zz="1"} 1',
    'm{zz="b" 1',
    'm{zz=b} 1',
    'm{zz="b"',
    'm{zz="x\\',
    'm{zz="x\\"} 1',
    'm{zz="a\\"b",a="é"} 3',
    'm{zz="b"c="d"} 1',
    'm{zz."b"="c"} 1',
    'm{zz="b",} 2',
    'm{a="1",zz="\\\\"} 4 1700000000000',
    'good 2',
    '',
  ].join('\n');
  const pages = [
    ...readdirSync(realPages)
      .filter((f) => f.endsWith('.txt'))
      .map((f) => readFileSync(new URL(f, realPages), 'utf8')),
    fixture('edge-cases.txt'),
    malformed,
  ];
  for (const text of pages) {
    const full = parsePromText(text, all);
    const kept = parsePromText(text, some);
    const chunked = readInChunks(Buffer.from(text), 5, some);
    assert.deepEqual(pageContent(chunked), pageContent(kept));
    const strip = (p: MetricPage) => ({
      ...pageContent(p),
      series: [...p.names()].map((n) => [
        n,
        p.series(n).map((s) => ({
          ...s,
          labels: Object.fromEntries(Object.entries(s.labels).filter(([k]) => keep.includes(k))),
        })),
      ]),
    });
    assert.deepEqual(strip(kept), strip(full));
  }
  const page = parsePromText(malformed, some);
  assert.equal(page.errors, 7, JSON.stringify(page.diagnostics));
  assert.deepEqual(
    page.series('m').map((s) => [{ ...s.labels }, s.value]),
    [
      [{ a: 'é' }, 3],
      [{}, 2],
      [{ a: '1' }, 4],
    ],
  );
  // The selector's own label strings: a union keeps every label as soon as one selector does.
  assert.equal(MetricSelector.union(some, all).keepsEveryLabel, true);
  assert.equal(MetricSelector.union(some, ADAPTERS.tgi.selector).keepsEveryLabel, false);
});

test('plain decimal sample values read exactly as Number reads them; other forms as before', () => {
  let seed = 7;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const digits = (n: number) => Array.from({ length: n }, () => Math.floor(random() * 10)).join('');
  const values = [
    '0',
    '-0',
    '0.0',
    '-0.0',
    '1.',
    '.5',
    '-.5',
    '00.25',
    '3.0',
    '0.4375',
    '0.6341463414634146',
    '9007199254740991',
    '9007199254740993',
    '90071992547409.93',
    '123456789012345678901234567890',
    '0.1234567890123456789012',
    '0.12345678901234567890123',
    '1e3',
    '1.7e+09',
    '4.296073216e+010',
    '+1',
    '+Inf',
    '-Inf',
    'NaN',
    '0x1F',
    '1..2',
    '1.2.3',
    '-',
    '.',
    '-.',
  ];
  for (let i = 0; i < 2000; i++) {
    const sign = random() < 0.3 ? '-' : '';
    const int = digits(Math.floor(random() * 18));
    values.push(random() < 0.3 ? sign + int : `${sign}${int}.${digits(Math.floor(random() * 25))}`);
  }
  const page = parsePromText(values.map((v, i) => `v{i="${i}"} ${v}`).join('\n'));
  const read = new Map(page.series('v').map((s) => [Number(s.labels.i), s.value]));
  for (const [i, text] of values.entries()) {
    assert.equal(read.get(i), parseFloatToken(text), `value ${JSON.stringify(text)}`);
  }
});
