// Package tokenizer loads a Hugging Face tokenizer.json with a byte-level BPE model and encodes
// text to the same token ids as the Rust tokenizers library the engines use.
//
// Only constructs it implements exactly are accepted: the NFC normalizer (or none), the
// pre-tokenizer patterns of GPT-2, Llama-3 / cl100k and Qwen2/3 (split by hand, because Go's
// regexp has no lookahead for `\s+(?!\S)`), the ByteLevel pre-tokenizer, a BPE model, added
// tokens without strip or single-word flags, and ByteLevel / TemplateProcessing post-processors.
// Anything else is refused at load with an error naming the file and the construct, never
// approximated: a tokenizer that is slightly wrong makes every cache lookup miss in silence.
package tokenizer
