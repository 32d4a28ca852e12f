package normalize

import "bytes"

// vLLM's per-block extra keys hold, in order: the LoRA name, multimodal
// items (a 64-hex-digit hash, or an [identifier, offset] pair), the cache
// salt (first block only) and a prompt-embeds digest (bytes). The decoder
// keeps the items as they came; the normalizer picks the multimodal hashes
// for each block's router hash and the salt for the namespace.

// extraKind is the kind of one item of a block's extra keys.
type extraKind uint8

const (
	extraOther extraKind = iota // anything else (ignored)
	extraStr                    // a string: LoRA name, multimodal hash or cache salt
	extraBytes                  // a binary, such as a prompt-embeds digest (ignored)
	extraPair                   // a multimodal [identifier, offset] pair
	extraInt                    // an integer (ignored)
)

// extraKey is one item of a block's extra keys. Str points into the payload.
type extraKey struct {
	Kind extraKind
	Str  []byte // extraStr, extraBytes, and the identifier of extraPair
	Int  int64  // the offset of extraPair, the value of extraInt
}

// extraKeys is the extra keys of one block; Present is false for nil.
type extraKeys struct {
	Present bool
	Items   []extraKey
}

// decodeExtraKeys reads extra_keys: nil, or a list with one entry per block,
// each nil or a list of items.
func (rb *rawBatch) decodeExtraKeys(r *reader, ev *rawEvent) error {
	if r.readNil() {
		ev.ExtraKeys = nil
		return nil
	}
	n, err := r.readArray()
	if err != nil {
		return err
	}
	base := len(rb.extras)
	for i := 0; i < n; i++ {
		if r.readNil() {
			rb.extras = append(rb.extras, extraKeys{})
			continue
		}
		m, err := r.readArray()
		if err != nil {
			return err
		}
		ib := len(rb.items)
		for j := 0; j < m; j++ {
			it, err := r.readExtraItem()
			if err != nil {
				return err
			}
			rb.items = append(rb.items, it)
		}
		rb.extras = append(rb.extras, extraKeys{Present: true, Items: rb.items[ib:len(rb.items):len(rb.items)]})
	}
	ev.ExtraKeys = rb.extras[base:len(rb.extras):len(rb.extras)]
	if ev.ExtraKeys == nil {
		ev.ExtraKeys = []extraKeys{} // present but empty, unlike absent
	}
	return nil
}

// readExtraItem reads one extra-key item; unknown shapes become extraOther.
func (r *reader) readExtraItem() (extraKey, error) {
	switch r.peek() {
	case mStr:
		s, _, err := r.readBytes()
		return extraKey{Kind: extraStr, Str: s}, err
	case mBin:
		s, _, err := r.readBytes()
		return extraKey{Kind: extraBytes, Str: s}, err
	case mUint, mInt:
		u, _, err := r.readInt()
		return extraKey{Kind: extraInt, Int: int64(u)}, err
	case mArray:
		save := r.off
		if n, _ := r.readArray(); n == 2 {
			if t := r.peek(); t == mStr || t == mBin {
				id, _, _ := r.readBytes()
				if t := r.peek(); t == mUint || t == mInt {
					u, _, err := r.readInt()
					return extraKey{Kind: extraPair, Str: id, Int: int64(u)}, err
				}
			}
		}
		r.off = save
	}
	return extraKey{Kind: extraOther}, r.skip()
}

// extraKeysSalt returns the cache salt in the first block's extra keys: its
// first string that is neither the LoRA name nor a multimodal hash.
func extraKeysSalt(ev *rawEvent) []byte {
	if len(ev.ExtraKeys) == 0 || !ev.ExtraKeys[0].Present {
		return nil
	}
	for _, it := range ev.ExtraKeys[0].Items {
		if it.Kind != extraStr || bytes.Equal(it.Str, ev.LoRAName) {
			continue
		}
		if _, isMM := hexMMHash(it.Str); isMM {
			continue
		}
		return it.Str
	}
	return nil
}

// appendBlockMM appends the multimodal item hashes of engine block j, in
// order, to dst.
func appendBlockMM(dst []uint64, ev *rawEvent, j int) []uint64 {
	if j >= len(ev.ExtraKeys) || !ev.ExtraKeys[j].Present {
		return dst
	}
	for _, it := range ev.ExtraKeys[j].Items {
		switch it.Kind {
		case extraStr:
			if h, ok := hexMMHash(it.Str); ok {
				dst = append(dst, h)
			}
		case extraPair:
			dst = append(dst, mmHashBytes(it.Str))
		}
	}
	return dst
}
