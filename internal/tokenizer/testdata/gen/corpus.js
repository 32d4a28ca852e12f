// Deterministic corpus of texts for the tokenizer parity goldens.
'use strict';

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

const fragments = [
  'Hello', 'world', ' the', 'The quick brown fox jumps over the lazy dog.', "don't", "I'm", "you're",
  "we've", "she'll", "he'd", "it's", "IT'S", "DON'T", "We'LL", "O'Neil", "'twas", "rock 'n' roll",
  'ſ', "'ſ", '’s', 'naïve', 'café', 'cafe\u0301', 'e\u0301\u0302', 'Å', 'A\u030a', '\u212b', 'ﬁ', 'ﬅ',
  '123', '4567', '89', '3.14159', '1,000,000', '2026-12-04', '0x1F', '१२३', '٣٤٥', '½', 'Ⅻ', '²',
  'def f(x):\n    return x * 2\n', 'if (a && b) { return; }', '\tindented', '#include <stdio.h>',
  'https://example.com/path?q=1&r=two#frag', 'user@example.org', '<html><body>hi</body></html>',
  '你好，世界', '日本語のテキスト', '한국어 문장', 'مرحبا بالعالم', 'שלום עולם', 'नमस्ते दुनिया', 'क्षत्रिय',
  'Привет мир', 'Ελληνικά', 'ไทย', 'ᄀᄁ', '👩‍👩‍👧', '👍🏽', '🏳️‍🌈', '❤️', '🇯🇵', '😀😃😄',
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>',
  '<think>', '</think>', '<tool_call>', '<|im_start', 'im_end|>', '<|', '|>', '<|reserved_special_token_5|>',
  '...', '!!!', '???', '---', '***', '«»', '“quoted”', '—', '–', '…', '$100', '€50', '£', '¥',
  '\u00a0', '\u0085', '\u2028', '\u2029', '\u3000', '\u200b', '\u200d', '\ufeff', '\u000b', '\u000c',
];
const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n', '\n ', ' \n\n  ', '\t\t', '\u00a0', '\u3000', '\u0085', '\r', '    '];

function edgeCases() {
  const out = [''];
  for (const s of spaces) {
    out.push(s, 'a' + s, s + 'a', 'a' + s + 'b', s + s, '1' + s + '2', '.' + s + '.', s + '<|im_start|>' + s);
  }
  for (let n = 1; n <= 14; n++) out.push('1234567890123456'.slice(0, n), ' ' + '9'.repeat(n), 'x' + '7'.repeat(n) + 'y');
  for (const c of ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]) {
    out.push(c, c.toUpperCase(), 'x' + c, ' ' + c, c + 'x', c + ' ', 'A' + c.toUpperCase() + 'B');
  }
  out.push("'S", "'Re", "'rE", "'ſ", "x'ſ", "'LL", "'lL", "''", "'", "' ", " '", "'1", "'é");
  out.push('a'.repeat(30000), ' '.repeat(30000), '1'.repeat(30000), 'ab'.repeat(15000), '😀'.repeat(7500));
  out.push('\n'.repeat(1000), ' \n'.repeat(3000), 'x '.repeat(15000));
  for (const f of fragments) out.push(f, ' ' + f, f + ' ', f + f, '  ' + f + '\n');
  return out;
}

// Random code points from many blocks; surrogates and unassigned planes avoided.
const ranges = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f],
  [0x2070, 0x209f], [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2150, 0x218f], [0x2190, 0x21ff], [0x2200, 0x22ff],
  [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xff00, 0xffef],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f900, 0x1f9ff], [0x1d400, 0x1d4ff], [0x10400, 0x1044f],
];

function randomText(r) {
  const parts = [];
  const n = 1 + Math.floor(r() * 40);
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.35) parts.push(fragments[Math.floor(r() * fragments.length)]);
    else if (k < 0.6) parts.push(spaces[Math.floor(r() * spaces.length)]);
    else if (k < 0.75) parts.push(String(Math.floor(r() * 1e7)));
    else {
      const [lo, hi] = ranges[Math.floor(r() * ranges.length)];
      const m = 1 + Math.floor(r() * 6);
      for (let j = 0; j < m; j++) parts.push(String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1))));
    }
  }
  return parts.join('');
}

function corpus(count) {
  const r = rng(20261204);
  const out = edgeCases();
  while (out.length < count) out.push(randomText(r));
  return out;
}

module.exports = { corpus, rng };
