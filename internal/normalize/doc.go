// Package normalize turns one engine's msgpack KV event batch into the router's
// normalized store, remove and clear events for one worker/rank, and owns the
// router block hash that both the index and the request path use.
//
// It decodes every engine shape (vLLM arrays and maps, SGLang, TensorRT-LLM,
// tokenspeed), learns hybrid-model group kinds and cache namespaces per
// worker/rank, and filters what cannot describe a reusable prefix, with a reason.
//
// It imports no other internal package.
package normalize
