package normalize

import (
	"errors"
	"fmt"
	"math"

	"github.com/shamaton/msgpack/v2"
)

// decodeBatchShamaton is the reference decoder: github.com/shamaton/msgpack/v2
// into an interface{} tree, then the same field rules as decodeBatch. It is
// the baseline of the benchmarks and the oracle of FuzzDifferential.
func decodeBatchShamaton(payload []byte, rb *rawBatch) error {
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

// checkTree rejects values decodeBatch rejects but shamaton accepts
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

func treeDPRank(v any, rb *rawBatch) error {
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

func (rb *rawBatch) fromTree(v any) error {
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
		for _, k := range wire.rankKeys {
			if d, ok := t[k]; ok && rb.DPRank < 0 {
				if err := treeDPRank(d, rb); err != nil {
					return err
				}
			}
		}
	default:
		return errTree
	}
	for i, e := range events.([]any) {
		rb.Events = append(rb.Events, rawEvent{BlockSize: -1})
		rb.treeEvent(e, &rb.Events[len(rb.Events)-1], i)
	}
	return nil
}

func (rb *rawBatch) treeEvent(v any, ev *rawEvent, idx int) {
	fail := func(f field, msg string) {
		e := &eventError{index: idx, tag: string(ev.Name), offset: -1, msg: msg}
		if f != noField {
			e.field = fieldNames[f]
		}
		ev.Err = e
	}
	switch t := v.(type) {
	case []any:
		if len(t) == 0 {
			fail(noField, "empty event array")
			return
		}
		name, ok := t[0].(string)
		if !ok {
			fail(noField, "tag")
			return
		}
		ev.Name, ev.Tag = []byte(name), tagOf([]byte(name))
		fields := wire.arrayFields[ev.Tag]
		for i := 1; i < len(t) && i-1 < len(fields); i++ {
			if msg := rb.treeField(t[i], ev, fields[i-1]); msg != "" {
				fail(fields[i-1], msg)
				return
			}
		}
	case map[any]any:
		tv, ok := t[mapTagKey]
		if !ok {
			fail(noField, "no type")
			return
		}
		name, ok := tv.(string)
		if !ok {
			fail(noField, "type")
			return
		}
		ev.Name, ev.Tag = []byte(name), tagOf([]byte(name))
		for f := field(0); f < numFields; f++ {
			fv, ok := t[fieldNames[f]]
			if !ok || !wire.mapFields[ev.Tag].has(f) {
				continue
			}
			if msg := rb.treeField(fv, ev, f); msg != "" {
				fail(f, msg)
				return
			}
		}
	default:
		fail(noField, "event type")
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

// treeOptUint reads nil or an integer in [0, limit].
func treeOptUint(v any, limit uint64) (uint64, bool, string) {
	if v == nil {
		return 0, false, ""
	}
	u, neg, ok := treeInt(v)
	if !ok {
		return 0, false, "want int"
	}
	if neg || u > limit {
		return 0, false, "out of range"
	}
	return u, true, ""
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

// treeField decodes field f from v into ev, as decodeField does from bytes;
// it returns what is wrong with v, or "".
func (rb *rawBatch) treeField(v any, ev *rawEvent, f field) string {
	var msg string
	switch f {
	case fBlockHashes:
		msg = treeHashes(v, ev)
	case fParent:
		ev.HasParent = v != nil
		if v != nil {
			var ok bool
			if ev.Parent, ok = treeHash(v); !ok {
				msg = "want hash"
			}
		}
	case fTokens:
		msg = treeTokens(v, ev)
	case fBlockSize:
		var u uint64
		var ok bool
		ev.BlockSize = -1
		if u, ok, msg = treeOptUint(v, math.MaxInt32); ok && u == 0 {
			msg = "block size 0"
		} else if ok {
			ev.BlockSize = int32(u)
		}
	case fLoRAID:
	case fLoRAName:
		msg = treeLoRAName(v, ev)
	case fExtraKeys:
		msg = treeExtraKeys(v, ev)
	case fGroup:
		var u uint64
		u, ev.HasGroup, msg = treeOptUint(v, math.MaxUint32)
		ev.Group = uint32(u)
	case fWindow:
		ev.HasWindow = v != nil
		if v != nil {
			u, _, ok := treeInt(v)
			if !ok {
				msg = "want int"
			}
			ev.SlidingWindow = int64(u)
		}
	case fMedium:
		ev.Medium, _, msg = treeOptStr(v)
	case fKind:
		ev.SpecKind, ev.HasKind, msg = treeOptStr(v)
	case fLocality:
		ev.Locality, _, msg = treeOptStr(v)
	case fCacheSalt:
		ev.CacheSalt, ev.HasCacheSalt, msg = treeOptStr(v)
	}
	return msg
}

func treeHashes(v any, ev *rawEvent) string {
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
	return ""
}

func treeTokens(v any, ev *rawEvent) string {
	ev.Bigram = false
	if v == nil {
		ev.Tokens = nil
		return ""
	}
	list, ok := v.([]any)
	if !ok {
		return "want array"
	}
	if len(list) > 0 {
		if _, bigram := list[0].([]any); bigram {
			return treeBigrams(list, ev)
		}
	}
	toks := make([]uint32, 0, len(list))
	for _, e := range list {
		t, msg := treeToken(e)
		if msg != "" {
			return msg
		}
		toks = append(toks, t)
	}
	ev.Tokens = toks
	return ""
}

func treeBigrams(list []any, ev *rawEvent) string {
	toks := make([]uint32, 0, len(list)+1)
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
	ev.Tokens, ev.Bigram = append(toks, last), true
	return ""
}

func treeLoRAName(v any, ev *rawEvent) string {
	if m, ok := v.(map[any]any); ok && wire.loraSlotSalt {
		ev.LoRAName = nil
		if sv, ok := m[fieldNames[fCacheSalt]]; ok {
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
}

func treeExtraKeys(v any, ev *rawEvent) string {
	if v == nil {
		ev.ExtraKeys = nil
		return ""
	}
	list, ok := v.([]any)
	if !ok {
		return "want array"
	}
	ek := make([]extraKeys, 0, len(list))
	for _, e := range list {
		if e == nil {
			ek = append(ek, extraKeys{})
			continue
		}
		items, ok := e.([]any)
		if !ok {
			return "want array"
		}
		var out []extraKey
		for _, it := range items {
			out = append(out, treeExtraItem(it))
		}
		ek = append(ek, extraKeys{Present: true, Items: out})
	}
	ev.ExtraKeys = ek
	return ""
}

func treeExtraItem(v any) extraKey {
	switch x := v.(type) {
	case string:
		return extraKey{Kind: extraStr, Str: []byte(x)}
	case []byte:
		return extraKey{Kind: extraBytes, Str: x}
	case []any:
		if len(x) == 2 {
			var id []byte
			switch s := x[0].(type) {
			case string:
				id = []byte(s)
			case []byte:
				id = s
			default:
				return extraKey{}
			}
			if u, _, ok := treeInt(x[1]); ok {
				return extraKey{Kind: extraPair, Str: id, Int: int64(u)}
			}
		}
		return extraKey{}
	}
	if u, _, ok := treeInt(v); ok {
		return extraKey{Kind: extraInt, Int: int64(u)}
	}
	return extraKey{}
}
