package normalize

import (
	"fmt"
	"slices"
	"strings"
)

// shapes is every engine wire shape the decoder accepts, one row per shape:
// how the engine lays out a batch and its events (all of them name the
// events BlockStored, BlockRemoved and AllBlocksCleared), and what
// conventions its values follow. The facts come from the engines' public
// sources and from the consumers in NVIDIA Dynamo and llm-d.
//
// A subscription does not say which engine, or which version of it,
// publishes on it (vLLM switched from arrays to maps between minor
// versions), so the decoder accepts every row at once. The tables it reads
// (wire, below) are derived from the rows when the package loads:
// tagged-array events are read by the positions of the array rows (which
// must agree where they overlap), tagged-map events by the keys of every map
// row, a batch map's rank by the rank keys of the rows that send batch maps
// (the first present and not nil wins, in row order), and lora_name may hold
// a salt map if a row sends one there. Hash and token forms are read wherever
// they come. TestShapeRoundTrip encodes a batch in every combination of
// forms a row lists and checks that it normalizes to the same events.
//
// Adding an engine shape is adding a row and its golden cases
// (testdata/cases/<case>.txt, named in the row; TestShapeCases checks they
// exist). testdata/shapes shows the derived tables.
var shapes = []shape{{
	name:    "vllm-array",
	engines: "vLLM <= 0.23",
	batch:   batchArray, // [ts, events] in the oldest builds
	rank:    "dp_rank",
	events:  taggedArray,
	stored:  "block_hashes parent_block_hash token_ids block_size lora_id medium lora_name extra_keys group_idx kv_cache_spec_kind kv_cache_spec_sliding_window locality",
	removed: "block_hashes medium group_idx locality",
	hashes:  hashUint | hashBin, // bin: 32-byte digests when int hashes are turned off
	salt:    saltExtraKeys,
	tokens:  tokenInts | tokenBigrams,
	topic:   `"" by default; llm-d: "kv@<pod>@<model>"`,
	cases:   "vllm_array_5 vllm_array_7 vllm_array_9 vllm_array_12 bytes_hashes multimodal salted_chains hybrid_groups eagle",
}, {
	name:    "vllm-map",
	engines: "vLLM from 0.24-0.26 on (0.26 captured)",
	batch:   batchArray | batchMap,
	rank:    "data_parallel_rank",
	events:  taggedMap, // keys equal to their default may be omitted
	stored:  "block_hashes parent_block_hash token_ids block_size lora_id medium lora_name extra_keys group_idx kv_cache_spec_kind kv_cache_spec_sliding_window locality cache_salt",
	removed: "block_hashes medium group_idx locality kv_cache_spec_kind",
	hashes:  hashUint | hashBin,
	salt:    saltExtraKeys | saltKey,
	tokens:  tokenInts | tokenBigrams,
	topic:   `"" by default; llm-d: "kv@<pod>@<model>"`,
	cases:   "vllm_map_026 cpu_offload lora map_edge_cases remove_kind batch_map",
}, {
	name:    "sglang-array",
	engines: "SGLang before its switch to maps",
	batch:   batchArray | batchMap,
	rank:    "attn_dp_rank",
	events:  taggedArray,
	stored:  "block_hashes parent_block_hash token_ids block_size lora_id medium lora_name",
	removed: "block_hashes medium",
	hashes:  hashInt,
	salt:    saltLoRASlot,
	tokens:  tokenInts | tokenBigramsPerPosition, // EAGLE radix keys
	topic:   `a prefix; may append "\x00sgl-kv-epoch=<uuid>"`,
	cases:   "sglang eagle_per_position",
}, {
	name:    "sglang-map",
	engines: "SGLang after its switch to maps",
	batch:   batchArray | batchMap,
	rank:    "attn_dp_rank",
	events:  taggedMap,
	stored:  "block_hashes parent_block_hash token_ids block_size lora_id medium lora_name cache_salt",
	removed: "block_hashes medium",
	hashes:  hashInt,
	salt:    saltKey,
	tokens:  tokenInts | tokenBigramsPerPosition,
	topic:   `a prefix; may append "\x00sgl-kv-epoch=<uuid>"`,
	cases:   "sglang_map",
}, {
	// Only the encoding and the hashes' sign are documented; the keys are
	// the ones every engine sends, read as vLLM names them.
	name:    "trtllm-map",
	engines: "TensorRT-LLM (ZMQ publisher)",
	batch:   batchArray,
	rank:    "dp_rank",
	events:  taggedMap,
	stored:  "block_hashes parent_block_hash token_ids block_size",
	removed: "block_hashes",
	hashes:  hashInt,
	salt:    saltNone,
	tokens:  tokenInts,
	topic:   `"" or a configured prefix`,
	cases:   "trtllm_map",
}, {
	// msgspec array_like structs with omit_defaults: trailing defaults
	// (a nil rank) are left out.
	name:    "tokenspeed-array",
	engines: "tokenspeed",
	batch:   batchArray | batchMap,
	rank:    "attn_dp_rank",
	events:  taggedArray,
	stored:  "block_hashes parent_block_hash token_ids block_size",
	removed: "block_hashes",
	hashes:  hashUint,
	salt:    saltNone,
	tokens:  tokenInts,
	topic:   `"" by default (KVEventsConfig.topic)`,
	cases:   "tokenspeed",
}}

// shape is one row of shapes.
type shape struct {
	name    string
	engines string // who sends it
	batch   batchForm
	// rank is the batch's data-parallel rank: element 2 of a batch array,
	// this key in a batch map.
	rank   string
	events eventForm
	// stored and removed are the wire names of BlockStored's and
	// BlockRemoved's fields: in array order for tagged arrays (trailing ones
	// may be missing, extra ones are ignored), the keys read for tagged maps
	// (in any order; unknown keys are ignored).
	stored, removed string
	hashes          hashForm
	salt            saltPlace // where the cache salt (the block's namespace) travels
	tokens          tokenForm
	topic           string // what the ZMQ topic frame holds; ingest matches it by prefix, the payload never carries it
	cases           string // golden cases in testdata/cases that exercise the shape
}

// batchForm is how a shape encodes the outer batch (a set).
type batchForm uint8

const (
	batchArray batchForm = 1 << iota // [ts, events, rank]
	batchMap                         // {"ts": ..., "events": [...], <rank>: ...}
)

// eventForm is how a shape encodes its events.
type eventForm uint8

const (
	// taggedArray: [tag, field, field, ...].
	taggedArray eventForm = iota + 1
	// taggedMap: {mapTagKey: tag, name: value, ...}.
	taggedMap
)

// mapTagKey is the key of a tagged map's tag.
const mapTagKey = "type"

// hashForm is how a shape encodes block hashes (a set). The decoder accepts
// all three anywhere: a hash is opaque, only its 64 bits matter.
type hashForm uint8

const (
	hashUint hashForm = 1 << iota // a msgpack positive integer
	hashInt                       // a signed int64: its two's-complement bits
	hashBin                       // bytes: the last 8, big-endian, left-padded with zeros
)

// saltPlace is where a shape sends a block's cache salt (a set).
type saltPlace uint8

const (
	saltNone saltPlace = 0
	// saltExtraKeys: a string in the first block's extra_keys that is neither
	// the LoRA name nor a multimodal hash.
	saltExtraKeys saltPlace = 1 << (iota - 1)
	// saltKey: the map key cache_salt.
	saltKey
	// saltLoRASlot: a map {"cache_salt": ...} in lora_name's position.
	saltLoRASlot
)

// tokenForm is how a shape encodes token_ids (a set).
type tokenForm uint8

const (
	tokenInts tokenForm = 1 << iota
	// tokenBigrams: EAGLE pairs [t_i, t_i+1], one fewer than the tokens.
	tokenBigrams
	// tokenBigramsPerPosition: EAGLE pairs, one per token position, so the
	// last pair's second token is the next block's first.
	tokenBigramsPerPosition
)

// eventTag is the kind of a decoded engine event.
type eventTag uint8

const (
	tagUnknown eventTag = iota // a tag this package does not know; the event is skipped
	tagStored                  // BlockStored
	tagRemoved                 // BlockRemoved
	tagCleared                 // AllBlocksCleared
	numTags
)

// The tags as engines send them.
const (
	storedName  = "BlockStored"
	removedName = "BlockRemoved"
	clearedName = "AllBlocksCleared"
)

var tagNames = [numTags]string{"unknown", storedName, removedName, clearedName}

// String returns the tag as engines send it ("unknown" for tagUnknown).
func (t eventTag) String() string {
	if t < numTags {
		return tagNames[t]
	}
	return fmt.Sprintf("eventTag(%d)", uint8(t))
}

func tagOf(name []byte) eventTag {
	switch string(name) {
	case storedName:
		return tagStored
	case removedName:
		return tagRemoved
	case clearedName:
		return tagCleared
	}
	return tagUnknown
}

// field is an event field. The constants are in vLLM's array order, which is
// also the order map fields are checked in, so that an event's first error is
// the same in both encodings.
type field uint8

const (
	fBlockHashes field = iota
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroup
	fKind
	fWindow
	fLocality
	fCacheSalt
	numFields
)

// fieldNames are the fields' wire names.
var fieldNames = [numFields]string{
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
	"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
	"locality", "cache_salt",
}

func (f field) String() string { return fieldNames[f] }

// fieldSet is a set of fields.
type fieldSet uint16

// allFields is the set of every field.
const allFields = fieldSet(1<<numFields - 1)

func (s fieldSet) has(f field) bool { return s&(1<<f) != 0 }

// wireTables is what the decoder reads, derived from shapes.
type wireTables struct {
	// arrayFields are the positions of a tagged array's fields after the tag.
	arrayFields [numTags][]field
	// mapFields are the fields a tagged map may carry, by tag.
	mapFields [numTags]fieldSet
	// mapKeys are the fields a tagged map may carry for any tag: a map's keys
	// are read before its tag may be known.
	mapKeys []mapKey
	// rankKeys are a batch map's rank keys, in row order.
	rankKeys []string
	// loraSlotSalt: lora_name may hold a {"cache_salt": ...} map instead.
	loraSlotSalt bool
}

// mapKey is a map key that names a field.
type mapKey struct {
	name string
	f    field
}

// maxRankKeys bounds rankKeys, so that a batch map's rank offsets fit an array.
const maxRankKeys = 4

var wire = deriveWire(shapes)

// deriveWire builds the decoder's tables from the rows. It panics on a row
// the tables cannot hold: every test of the package loads it.
func deriveWire(rows []shape) *wireTables {
	w := &wireTables{}
	var keys fieldSet
	for _, s := range rows {
		stored, removed := mustFields(s, s.stored), mustFields(s, s.removed)
		checkSalt(s, stored)
		switch s.events {
		case taggedArray:
			w.arrayFields[tagStored] = mergeArray(s, w.arrayFields[tagStored], stored)
			w.arrayFields[tagRemoved] = mergeArray(s, w.arrayFields[tagRemoved], removed)
		case taggedMap:
			for _, f := range stored {
				w.mapFields[tagStored] |= 1 << f
			}
			for _, f := range removed {
				w.mapFields[tagRemoved] |= 1 << f
			}
		default:
			panic(fmt.Sprintf("shape %s: no event form", s.name))
		}
		if s.batch&batchMap != 0 && !slices.Contains(w.rankKeys, s.rank) {
			w.rankKeys = append(w.rankKeys, s.rank)
		}
		if s.rank == "" || s.cases == "" {
			panic(fmt.Sprintf("shape %s: no rank field or no golden cases", s.name))
		}
		w.loraSlotSalt = w.loraSlotSalt || s.salt&saltLoRASlot != 0
	}
	if len(w.rankKeys) > maxRankKeys {
		panic(fmt.Sprintf("%d batch rank keys, at most %d", len(w.rankKeys), maxRankKeys))
	}
	for _, set := range w.mapFields {
		keys |= set
	}
	for f := field(0); f < numFields; f++ {
		if keys.has(f) {
			w.mapKeys = append(w.mapKeys, mapKey{fieldNames[f], f})
		}
	}
	return w
}

// mustFields parses a row's field list.
func mustFields(s shape, list string) []field {
	var out []field
	var seen fieldSet
	for _, name := range strings.Fields(list) {
		f, ok := fieldNamed(name)
		if !ok || seen.has(f) {
			panic(fmt.Sprintf("shape %s: unknown or repeated field %q", s.name, name))
		}
		seen |= 1 << f
		out = append(out, f)
	}
	if len(out) == 0 || out[0] != fBlockHashes {
		panic(fmt.Sprintf("shape %s: fields %q do not start with block_hashes", s.name, list))
	}
	return out
}

func fieldNamed(name string) (field, bool) {
	for f := field(0); f < numFields; f++ {
		if fieldNames[f] == name {
			return f, true
		}
	}
	return 0, false
}

// checkSalt checks that a row carries the fields its salt travels in.
func checkSalt(s shape, stored []field) {
	for _, c := range []struct {
		place saltPlace
		f     field
	}{{saltExtraKeys, fExtraKeys}, {saltKey, fCacheSalt}, {saltLoRASlot, fLoRAName}} {
		if s.salt&c.place != 0 && !slices.Contains(stored, c.f) {
			panic(fmt.Sprintf("shape %s: salt travels in %s, which it does not send", s.name, c.f))
		}
	}
	if slices.Contains(stored, fCacheSalt) && s.salt&saltKey == 0 {
		panic(fmt.Sprintf("shape %s: sends cache_salt but its salt column does not say so", s.name))
	}
}

// mergeArray merges one row's positional fields into the positions so far:
// the decoder cannot tell array rows apart, so they must agree where they
// overlap.
func mergeArray(s shape, have, row []field) []field {
	for i, f := range row {
		if i < len(have) && have[i] != f {
			panic(fmt.Sprintf("shape %s: position %d is %s, another array shape has %s there", s.name, i+1, f, have[i]))
		}
	}
	if len(row) > len(have) {
		return row
	}
	return have
}

// fieldOfKey returns the field a tagged map's key names, if any.
func (w *wireTables) fieldOfKey(key []byte) (field, bool) {
	for _, k := range w.mapKeys {
		if string(key) == k.name {
			return k.f, true
		}
	}
	return 0, false
}

// rankKey returns the index in rankKeys of a batch map's key, or -1.
func (w *wireTables) rankKey(key []byte) int {
	for i, k := range w.rankKeys {
		if string(key) == k {
			return i
		}
	}
	return -1
}
