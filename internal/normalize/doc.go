// Package normalize turns one engine's msgpack KV event batch into the router's
// normalized store, remove and clear events for one worker/rank, and owns the
// router block hash that both the index and the request path use.
//
// A Normalizer (one per worker/rank) turns a payload into a Batch of Events.
// It decodes every engine shape (vLLM arrays and maps, SGLang, TensorRT-LLM,
// tokenspeed: the rows of shapes.go, which the decoder's tables are derived
// from), learns hybrid-model group kinds and cache namespaces per
// worker/rank, and filters what cannot describe a reusable prefix, with a
// Reason.
//
// Decoding is a zero-copy msgpack reader (reader.go) that allocates nothing
// once a Batch's memory has grown, checked against
// github.com/shamaton/msgpack/v2 by FuzzDifferential. Seed, BlockHash, MMHash
// and HashPrompt are the router block hash, specified byte by byte in the
// docs/block-hash.md, with test vectors in
// testdata/hash_vectors.json.
//
// Where things are: decode.go (the outer batch), event.go (tagged arrays and
// maps), fields.go (field values), extrakeys.go (vLLM's per-block extra
// keys), normalizer.go (the Normalizer and its state), store.go and
// remove.go (one event each), split.go (engine blocks larger than the
// router's), filter.go (hybrid-model groups, locality), namespace.go (cache
// salts), tier.go (storage media). Golden cases: testdata/cases, datadriven
// scripts (go test -rewrite regenerates them).
//
// It imports only internal/kv, the shared vocabulary.
package normalize
