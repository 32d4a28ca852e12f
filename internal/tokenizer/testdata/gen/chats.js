// Deterministic chat conversations for the chat template parity goldens.
'use strict';
const { rng } = require('./corpus.js');

const says = [
  'Hello!', 'What is the capital of France?', 'Paris.', 'Explain BPE in one sentence.',
  'Write a haiku about caches.', '  leading and trailing spaces  ', 'line one\nline two\n\nline four',
  'Numbers: 1234567 and 3.14', 'Code:\n```go\nfunc main() {\n\tfmt.Println("hi")\n}\n```', '你好，请介绍一下你自己。',
  'مرحبا', 'नमस्ते', '👩‍👩‍👧 family', 'Tabs\tand\ttabs', "It's fine, isn't it?", 'A <|im_start|> look-alike',
  '<think>\nhidden\n</think>\n\nvisible answer', 'Sure — here is a list:\n- one\n- two', '', 'ok',
];
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'add', description: 'Add two numbers',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } } },
];

function conversations(model, count) {
  const r = rng(model === 'qwen3' ? 33 : 34);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const out = [];
  for (let i = 0; i < count; i++) {
    const messages = [];
    if (r() < 0.5) messages.push({ role: 'system', content: pick(says) });
    const turns = 1 + Math.floor(r() * 4);
    for (let t = 0; t < turns; t++) {
      messages.push({ role: 'user', content: pick(says) });
      if (t < turns - 1 || r() < 0.3) messages.push({ role: 'assistant', content: pick(says) });
    }
    const c = { messages, add_generation_prompt: messages[messages.length - 1].role !== 'assistant' || r() < 0.2 };
    if (model === 'qwen3') {
      if (r() < 0.3) c.tools = tools;
      if (r() < 0.3) c.kwargs = { enable_thinking: r() < 0.5 };
      if (r() < 0.15) {
        messages.push({ role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] });
        messages.push({ role: 'tool', content: '{"temp": 21}' });
        c.add_generation_prompt = true;
      }
    }
    if (i % 10 === 9) {
      // A prefill: the final assistant message is continued, not closed.
      messages.push({ role: 'assistant', content: says[i % says.length] || 'Partial answer' });
      c.add_generation_prompt = false;
      c.continue_final_message = true;
    }
    out.push(c);
  }
  return out;
}

module.exports = { conversations };
