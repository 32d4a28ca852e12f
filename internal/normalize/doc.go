// Package normalize turns one engine's msgpack KV event batch into the router's
// normalized store, remove and clear events for one worker/rank, and owns the
// router block hash that both the index and the request path use.
//
// It decodes every engine shape (vLLM arrays and maps, SGLang, TensorRT-LLM,
// tokenspeed), learns hybrid-model group kinds and cache namespaces per
// worker/rank, and filters what cannot describe a reusable prefix, with a reason.
//
// DecodeBatch is the raw decode step: a zero-copy msgpack reader that
// allocates nothing once its RawBatch has grown, checked against
// github.com/shamaton/msgpack/v2 by FuzzDifferential. A Normalizer (one per
// worker/rank) turns a payload into a Batch of Events. Seed, BlockHash, MMHash
// and HashPrompt are the router block hash, specified byte by byte in the
// README's "Router block hash" section, with test vectors in
// testdata/hash_vectors.json.
//
// It imports only internal/kv, the shared vocabulary.
package normalize
