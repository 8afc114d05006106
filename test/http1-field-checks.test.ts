// The header checks every message goes through are loops over char codes; they must accept and
// refuse exactly what the regexes they replaced did.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { breaksLine, isFieldName } from '../shared/http1.ts';
import { mulberry32 } from '../shared/sim/random.ts';

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const LINE_BREAK = /[\r\n\0]/;

test('a field name is a token and a line breaker is CR, LF or NUL, exactly as the grammar regexes say', () => {
  const samples = ['', 'content-type', 'X-Request-Id', 'a b', 'a:b', 'ok\r\n', 'ü', 'a\u0000', '\u{1F600}'];
  for (let c = 0; c < 0x3000; c++) samples.push(String.fromCharCode(c), `x-${String.fromCharCode(c)}-y`);
  const rand = mulberry32(13);
  const alphabet = "aZ9-_.!~|`^'*+#$%&:; \t\r\n\u0000\u007f\u00e9\u2028";
  for (let i = 0; i < 5000; i++) {
    let s = '';
    for (let n = Math.floor(rand() * 12); n > 0; n--) s += alphabet[Math.floor(rand() * alphabet.length)];
    samples.push(s);
  }
  for (const s of samples) {
    assert.equal(isFieldName(s), TOKEN.test(s), JSON.stringify(s));
    assert.equal(breaksLine(s), LINE_BREAK.test(s), JSON.stringify(s));
  }
});
