package engine

import (
	"fmt"
	"time"

	"github.com/shamaton/msgpack/v2"
)

// Format selects how batches and events are encoded on the wire.
type Format int

// Wire formats.
const (
	// FormatVLLMMap is vLLM >= 0.24: batch [ts, events, dp_rank], each event a map
	// with its tag under "type".
	FormatVLLMMap Format = iota
	// FormatVLLMArray is vLLM <= 0.23: batch [ts, events, dp_rank], each event a
	// tagged array with fields in declaration order.
	FormatVLLMArray
	// FormatSGLang is SGLang's shape: batch map {"ts", "events", "attn_dp_rank"},
	// tagged-array events and block hashes as signed int64.
	FormatSGLang
)

// ParseFormat parses "vllm-map", "vllm-array" or "sglang".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "vllm-map", "map", "":
		return FormatVLLMMap, nil
	case "vllm-array", "array":
		return FormatVLLMArray, nil
	case "sglang":
		return FormatSGLang, nil
	}
	return 0, fmt.Errorf("unknown event format %q (want vllm-map, vllm-array or sglang)", s)
}

func (f Format) String() string {
	switch f {
	case FormatVLLMMap:
		return "vllm-map"
	case FormatVLLMArray:
		return "vllm-array"
	case FormatSGLang:
		return "sglang"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// EventKind is the kind of a KV cache event.
type EventKind uint8

// Event kinds.
const (
	Stored EventKind = iota + 1
	Removed
	Cleared
)

// Event is one KV cache event before encoding.
type Event struct {
	Kind EventKind
	// Hashes are the engine block hashes stored or removed.
	Hashes []uint64
	// HasParent and Parent give the engine hash of the block before Hashes[0].
	HasParent bool
	Parent    uint64
	// Tokens are all tokens of the stored blocks.
	Tokens []uint32
	// BlockSize is tokens per block.
	BlockSize int
}

// Encode encodes one batch of events in format f for data-parallel rank dpRank.
func Encode(f Format, ts time.Time, dpRank uint32, events []Event) ([]byte, error) {
	sec := float64(ts.UnixNano()) / 1e9
	evs := make([]any, len(events))
	for i, ev := range events {
		var err error
		if evs[i], err = encodeEvent(f, ev); err != nil {
			return nil, err
		}
	}
	var batch any
	switch f {
	case FormatVLLMMap, FormatVLLMArray:
		batch = []any{sec, evs, dpRank}
	case FormatSGLang:
		batch = map[string]any{"ts": sec, "events": evs, "attn_dp_rank": dpRank}
	default:
		return nil, fmt.Errorf("encode batch: unknown format %d", f)
	}
	b, err := msgpack.Marshal(batch)
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	return b, nil
}

func encodeEvent(f Format, ev Event) (any, error) {
	var hashes any = ev.Hashes
	var parent any
	if ev.HasParent {
		parent = ev.Parent
	}
	if f == FormatSGLang {
		signed := make([]int64, len(ev.Hashes))
		for i, h := range ev.Hashes {
			signed[i] = int64(h)
		}
		hashes = signed
		if ev.HasParent {
			parent = int64(ev.Parent)
		}
	}
	switch ev.Kind {
	case Stored:
		if f == FormatVLLMMap {
			return map[string]any{
				"type":               "BlockStored",
				"block_hashes":       hashes,
				"parent_block_hash":  parent,
				"token_ids":          ev.Tokens,
				"block_size":         ev.BlockSize,
				"lora_id":            nil,
				"medium":             "GPU",
				"lora_name":          nil,
				"extra_keys":         nil,
				"group_idx":          0,
				"kv_cache_spec_kind": "full_attention",
			}, nil
		}
		return []any{"BlockStored", hashes, parent, ev.Tokens, ev.BlockSize, nil, "GPU", nil}, nil
	case Removed:
		if f == FormatVLLMMap {
			return map[string]any{"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}, nil
		}
		return []any{"BlockRemoved", hashes, "GPU"}, nil
	case Cleared:
		if f == FormatVLLMMap {
			return map[string]any{"type": "AllBlocksCleared"}, nil
		}
		return []any{"AllBlocksCleared"}, nil
	}
	return nil, fmt.Errorf("encode event: unknown kind %d", ev.Kind)
}
