package normalize

import (
	"errors"
	"fmt"
	"math"

	"github.com/shamaton/msgpack/v2"
)

// decodeBatchShamaton is the reference decoder: github.com/shamaton/msgpack/v2
// into an interface{} tree, then the same field rules as DecodeBatch. It is
// the baseline of the benchmarks and the oracle of FuzzDifferential.
func decodeBatchShamaton(payload []byte, rb *RawBatch) error {
	rb.reset()
	var v any
	if err := msgpack.Unmarshal(payload, &v); err != nil {
		return fmt.Errorf("decode batch: %w", err)
	}
	if err := checkTree(v); err != nil {
		return err
	}
	err := rb.fromTree(v)
	if err != nil {
		rb.reset()
	}
	return err
}

// checkTree rejects values DecodeBatch rejects but shamaton accepts
// (its timestamp extension).
func checkTree(v any) error {
	switch t := v.(type) {
	case []any:
		for _, e := range t {
			if err := checkTree(e); err != nil {
				return err
			}
		}
	case map[any]any:
		for k, e := range t {
			if err := checkTree(k); err != nil {
				return err
			}
			if err := checkTree(e); err != nil {
				return err
			}
		}
	case nil, bool, string, []byte, float32, float64,
		int8, int16, int32, int64, uint8, uint16, uint32, uint64:
	default:
		return fmt.Errorf("decode batch: unsupported value %T", v)
	}
	return nil
}

var errTree = errors.New("bad batch")

func treeInt(v any) (u uint64, neg, ok bool) {
	switch x := v.(type) {
	case uint8:
		return uint64(x), false, true
	case uint16:
		return uint64(x), false, true
	case uint32:
		return uint64(x), false, true
	case uint64:
		return x, false, true
	case int8:
		return uint64(int64(x)), x < 0, true
	case int16:
		return uint64(int64(x)), x < 0, true
	case int32:
		return uint64(int64(x)), x < 0, true
	case int64:
		return uint64(x), x < 0, true
	}
	return 0, false, false
}

func treeNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	u, neg, ok := treeInt(v)
	if !ok {
		return 0, false
	}
	if neg {
		return float64(int64(u)), true
	}
	return float64(u), true
}

func treeDPRank(v any, rb *RawBatch) error {
	if v == nil {
		return nil
	}
	u, neg, ok := treeInt(v)
	if !ok || neg || u > math.MaxInt32 {
		return errTree
	}
	rb.DPRank = int32(u)
	return nil
}

func (rb *RawBatch) fromTree(v any) error {
	var events any
	switch t := v.(type) {
	case []any:
		if len(t) < 2 {
			return errTree
		}
		ts, ok := treeNumber(t[0])
		if !ok {
			return errTree
		}
		rb.TS = ts
		events = t[1]
		if _, ok := events.([]any); !ok {
			return errTree
		}
		if len(t) >= 3 {
			if err := treeDPRank(t[2], rb); err != nil {
				return err
			}
		}
	case map[any]any:
		ev, ok := t["events"]
		if !ok {
			return errTree
		}
		if tsv, ok := t["ts"]; ok {
			ts, ok := treeNumber(tsv)
			if !ok {
				return errTree
			}
			rb.TS = ts
		}
		if _, ok := ev.([]any); !ok {
			return errTree
		}
		events = ev
		if d, ok := t["data_parallel_rank"]; ok {
			if err := treeDPRank(d, rb); err != nil {
				return err
			}
		}
		if a, ok := t["attn_dp_rank"]; ok && rb.DPRank < 0 {
			if err := treeDPRank(a, rb); err != nil {
				return err
			}
		}
	default:
		return errTree
	}
	for i, e := range events.([]any) {
		rb.Events = append(rb.Events, RawEvent{BlockSize: -1})
		rb.treeEvent(e, &rb.Events[len(rb.Events)-1], i)
	}
	return nil
}

func (rb *RawBatch) treeEvent(v any, ev *RawEvent, idx int) {
	fail := func(field int, msg string) {
		e := &EventError{Index: idx, Tag: string(ev.Name), Offset: -1, Msg: msg}
		if field >= 0 {
			e.Field = fieldNames[field]
		}
		ev.Err = e
	}
	switch t := v.(type) {
	case []any:
		if len(t) == 0 {
			fail(-1, "empty event array")
			return
		}
		name, ok := t[0].(string)
		if !ok {
			fail(-1, "tag")
			return
		}
		ev.Name, ev.Tag = []byte(name), tagOf([]byte(name))
		var fields []int
		switch ev.Tag {
		case TagStored:
			fields = storedArrayFields[:]
		case TagRemoved:
			fields = removedArrayFields[:]
		default:
			return
		}
		for i := 1; i < len(t) && i-1 < len(fields); i++ {
			if msg := rb.treeField(t[i], ev, fields[i-1]); msg != "" {
				fail(fields[i-1], msg)
				return
			}
		}
	case map[any]any:
		tv, ok := t["type"]
		if !ok {
			fail(-1, "no type")
			return
		}
		name, ok := tv.(string)
		if !ok {
			fail(-1, "type")
			return
		}
		ev.Name, ev.Tag = []byte(name), tagOf([]byte(name))
		if ev.Tag != TagStored && ev.Tag != TagRemoved {
			return
		}
		for f := 0; f < numFields; f++ {
			if ev.Tag == TagRemoved && !removedField(f) {
				continue
			}
			fv, ok := t[fieldNames[f]]
			if !ok {
				continue
			}
			if msg := rb.treeField(fv, ev, f); msg != "" {
				fail(f, msg)
				return
			}
		}
	default:
		fail(-1, "event type")
	}
}

func treeHash(v any) (uint64, bool) {
	if b, ok := v.([]byte); ok {
		return hashFromBytes(b), true
	}
	u, _, ok := treeInt(v)
	return u, ok
}

func treeOptStr(v any) ([]byte, bool, string) {
	if v == nil {
		return nil, false, ""
	}
	s, ok := v.(string)
	if !ok {
		return nil, false, "want str"
	}
	return []byte(s), true, ""
}

func treeToken(v any) (uint32, string) {
	u, neg, ok := treeInt(v)
	if !ok {
		return 0, "want int"
	}
	if neg || u > math.MaxUint32 {
		return 0, "token out of range"
	}
	return uint32(u), ""
}

func (rb *RawBatch) treeField(v any, ev *RawEvent, f int) string {
	switch f {
	case fBlockHashes:
		if v == nil {
			return ""
		}
		list, ok := v.([]any)
		if !ok {
			return "want array"
		}
		hs := make([]uint64, 0, len(list))
		for _, e := range list {
			h, ok := treeHash(e)
			if !ok {
				return "want hash"
			}
			hs = append(hs, h)
		}
		ev.BlockHashes = hs
	case fParent:
		if v == nil {
			ev.HasParent = false
			return ""
		}
		h, ok := treeHash(v)
		if !ok {
			return "want hash"
		}
		ev.HasParent, ev.Parent = true, h
	case fTokens:
		ev.Bigram = false
		if v == nil {
			ev.Tokens = nil
			return ""
		}
		list, ok := v.([]any)
		if !ok {
			return "want array"
		}
		toks := make([]uint32, 0, len(list)+1)
		if len(list) > 0 {
			if _, bigram := list[0].([]any); bigram {
				var last uint32
				for _, e := range list {
					pair, ok := e.([]any)
					if !ok {
						return "want array"
					}
					if len(pair) != 2 {
						return "bigram length"
					}
					a, msg := treeToken(pair[0])
					if msg != "" {
						return msg
					}
					b, msg := treeToken(pair[1])
					if msg != "" {
						return msg
					}
					toks = append(toks, a)
					last = b
				}
				toks = append(toks, last)
				ev.Tokens, ev.Bigram = toks, true
				return ""
			}
		}
		for _, e := range list {
			t, msg := treeToken(e)
			if msg != "" {
				return msg
			}
			toks = append(toks, t)
		}
		ev.Tokens = toks
	case fBlockSize:
		ev.BlockSize = -1
		if v == nil {
			return ""
		}
		u, neg, ok := treeInt(v)
		if !ok {
			return "want int"
		}
		if neg || u > math.MaxInt32 {
			return "out of range"
		}
		if u == 0 {
			return "block size 0"
		}
		ev.BlockSize = int32(u)
	case fLoRAID:
	case fMedium:
		s, _, msg := treeOptStr(v)
		ev.Medium = s
		return msg
	case fLoRAName:
		if m, ok := v.(map[any]any); ok {
			ev.LoRAName = nil
			if sv, ok := m["cache_salt"]; ok {
				s, has, msg := treeOptStr(sv)
				if msg != "" {
					return msg
				}
				ev.HasCacheSalt, ev.CacheSalt = has, s
			}
			return ""
		}
		s, _, msg := treeOptStr(v)
		ev.LoRAName = s
		return msg
	case fExtraKeys:
		if v == nil {
			ev.ExtraKeys = nil
			return ""
		}
		list, ok := v.([]any)
		if !ok {
			return "want array"
		}
		ek := make([]ExtraKeys, 0, len(list))
		for _, e := range list {
			if e == nil {
				ek = append(ek, ExtraKeys{})
				continue
			}
			items, ok := e.([]any)
			if !ok {
				return "want array"
			}
			var out []ExtraKey
			for _, it := range items {
				out = append(out, treeExtraItem(it))
			}
			ek = append(ek, ExtraKeys{Present: true, Items: out})
		}
		ev.ExtraKeys = ek
	case fGroup:
		if v == nil {
			ev.HasGroup = false
			return ""
		}
		u, neg, ok := treeInt(v)
		if !ok {
			return "want int"
		}
		if neg || u > math.MaxUint32 {
			return "out of range"
		}
		ev.HasGroup, ev.Group = true, uint32(u)
	case fKind:
		s, has, msg := treeOptStr(v)
		ev.HasKind, ev.SpecKind = has, s
		return msg
	case fWindow:
		if v == nil {
			ev.HasWindow = false
			return ""
		}
		u, _, ok := treeInt(v)
		if !ok {
			return "want int"
		}
		ev.HasWindow, ev.SlidingWindow = true, int64(u)
	case fLocality:
		s, _, msg := treeOptStr(v)
		ev.Locality = s
		return msg
	case fCacheSalt:
		s, has, msg := treeOptStr(v)
		ev.HasCacheSalt, ev.CacheSalt = has, s
		return msg
	}
	return ""
}

func treeExtraItem(v any) ExtraKey {
	switch x := v.(type) {
	case string:
		return ExtraKey{Kind: ExtraStr, Str: []byte(x)}
	case []byte:
		return ExtraKey{Kind: ExtraBytes, Str: x}
	case []any:
		if len(x) == 2 {
			var id []byte
			switch s := x[0].(type) {
			case string:
				id = []byte(s)
			case []byte:
				id = s
			default:
				return ExtraKey{}
			}
			if u, _, ok := treeInt(x[1]); ok {
				return ExtraKey{Kind: ExtraPair, Str: id, Int: int64(u)}
			}
		}
		return ExtraKey{}
	}
	if u, _, ok := treeInt(v); ok {
		return ExtraKey{Kind: ExtraInt, Int: int64(u)}
	}
	return ExtraKey{}
}
