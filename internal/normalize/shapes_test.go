package normalize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestShapeCases: every row names golden cases, and they exist.
func TestShapeCases(t *testing.T) {
	for _, s := range shapes {
		for _, c := range strings.Fields(s.cases) {
			if _, err := os.Stat(filepath.Join("testdata", "cases", c+".txt")); err != nil {
				t.Errorf("shape %s: golden case %s: %v", s.name, c, err)
			}
		}
	}
}

// TestShapesWire shows the tables the decoder reads, derived from the rows
// (testdata/shapes): a row that changes what the decoder accepts shows here.
func TestShapesWire(t *testing.T) {
	datadriven.RunTest(t, "testdata/shapes", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "wire" {
			td.Fatalf(t, "unknown command %q", td.Cmd)
		}
		return describeWire(wire)
	})
}

func describeWire(w *wireTables) string {
	var sb strings.Builder
	names := func(fs []field) string {
		if len(fs) == 0 {
			return "-"
		}
		var s []string
		for _, f := range fs {
			s = append(s, f.String())
		}
		return strings.Join(s, " ")
	}
	sb.WriteString("tagged array positions after the tag:\n")
	for t := tagStored; t < numTags; t++ {
		fmt.Fprintf(&sb, "  %s: %s\n", t, names(w.arrayFields[t]))
	}
	sb.WriteString("tagged map keys, in the order errors are reported:\n")
	for t := tagStored; t < numTags; t++ {
		var fs []field
		for f := field(0); f < numFields; f++ {
			if w.mapFields[t].has(f) {
				fs = append(fs, f)
			}
		}
		fmt.Fprintf(&sb, "  %s: %s\n", t, names(fs))
	}
	var keys []field
	for _, k := range w.mapKeys {
		keys = append(keys, k.f)
	}
	fmt.Fprintf(&sb, "map keys read before the tag is known: %s\n", names(keys))
	fmt.Fprintf(&sb, "batch map rank keys, first present and not nil wins: %s\n", strings.Join(w.rankKeys, " "))
	fmt.Fprintf(&sb, "lora_name may be a {\"cache_salt\": ...} map: %v\n", w.loraSlotSalt)
	return sb.String()
}

// TestDeriveWireRejects: rows the decoder could not tell apart, or that
// contradict themselves, are rejected when the package loads.
func TestDeriveWireRejects(t *testing.T) {
	base := shape{name: "x", batch: batchArray, rank: "dp_rank", events: taggedArray,
		stored: "block_hashes parent_block_hash token_ids", removed: "block_hashes", cases: "x"}
	for _, tc := range []struct {
		name string
		edit func(*shape)
		want string
	}{
		{"unknown field", func(s *shape) { s.stored += " lora_names" }, `unknown or repeated field "lora_names"`},
		{"repeated field", func(s *shape) { s.stored += " token_ids" }, `unknown or repeated field "token_ids"`},
		{"no block hashes first", func(s *shape) { s.removed = "medium block_hashes" }, "do not start with block_hashes"},
		{"position conflict", func(s *shape) { s.stored = "block_hashes token_ids" }, "position 2 is token_ids, another array shape has parent_block_hash there"},
		{"salt field missing", func(s *shape) { s.salt = saltExtraKeys }, "salt travels in extra_keys, which it does not send"},
		{"cache_salt unexplained", func(s *shape) { s.events, s.stored = taggedMap, "block_hashes cache_salt" }, "sends cache_salt but its salt column does not say so"},
		{"no cases", func(s *shape) { s.cases = "" }, "no rank field or no golden cases"},
		{"no event form", func(s *shape) { s.events = 0 }, "no event form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.edit(&s)
			got := derivePanic([]shape{base, s})
			if !strings.Contains(got, tc.want) {
				t.Errorf("panic %q, want %q", got, tc.want)
			}
		})
	}
	var many []shape
	for i := 0; i <= maxRankKeys; i++ {
		s := base
		s.batch, s.rank = batchMap, fmt.Sprintf("rank%d", i)
		many = append(many, s)
	}
	if got := derivePanic(many); !strings.Contains(got, "batch rank keys") {
		t.Errorf("%d rank keys: panic %q", len(many), got)
	}
	if got := derivePanic([]shape{base}); got != "" {
		t.Errorf("valid row: panic %q", got)
	}
}

func derivePanic(rows []shape) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	deriveWire(rows)
	return ""
}

// TestShapeRoundTrip encodes, for every row and every combination of the
// forms it lists (batch, hashes, tokens, salt place), a batch the way that
// engine sends it: a salted two-block store, an unsalted child (which
// inherits the salt), a remove of the child and a clear. Each must normalize
// to the same events.
func TestShapeRoundTrip(t *testing.T) {
	const h1, h2, h3 = 0xF000000000000001, 0xF000000000000002, 0x7000000000000003
	for _, s := range shapes {
		for _, bf := range formsOf(uint8(s.batch), batchArray, batchMap) {
			for _, hf := range formsOf(uint8(s.hashes), hashUint, hashInt, hashBin) {
				for _, tf := range formsOf(uint8(s.tokens), tokenInts, tokenBigrams, tokenBigramsPerPosition) {
					for _, sp := range append(formsOf(uint8(s.salt), saltExtraKeys, saltKey, saltLoRASlot), saltNone) {
						if sp == saltNone && s.salt != saltNone {
							continue
						}
						name := fmt.Sprintf("%s/batch%d/hash%d/tokens%d/salt%d", s.name, bf, hf, tf, sp)
						t.Run(name, func(t *testing.T) {
							e := shapeEncoder{s: s, hashes: hf, tokens: tf, salt: sp}
							desc := e.batch(bf, e.stored([]uint64{h1, h2}, 0, false, 1, true),
								e.stored([]uint64{h3}, h2, true, 33, false), e.removed(h3), e.tagOnly(tagCleared))
							checkRoundTrip(t, desc, sp != saltNone, h1, h2, h3)
						})
					}
				}
			}
		}
	}
}

func checkRoundTrip(t *testing.T, desc string, salted bool, h1, h2, h3 uint64) {
	ns := ""
	if salted {
		ns = "tenant"
	}
	seed := Seed("", ns)
	names := map[uint64]string{BlockHash(seed, seqTokens(1, 16), nil): "A",
		BlockHash(seed, seqTokens(17, 16), nil): "B", BlockHash(seed, seqTokens(33, 16), nil): "C"}
	var b Batch
	if err := New(Config{}).Normalize(mustDesc(t, desc), &b); err != nil {
		t.Fatalf("%v\npayload: %s", err, desc)
	}
	want := fmt.Sprintf("ts=1.5 dp=2 | store device - %d:A %d:B | store device %d %d:C | remove device %d | clear", h1, h2, h2, h3, h3)
	if got := summarize(&b, names); got != want || len(b.Errors) != 0 {
		t.Errorf("got  %s\nwant %s\nerrors %v\npayload: %s", got, want, b.Errors, desc)
	}
}

// formsOf returns the forms in set, failing on bits it does not know.
func formsOf[F ~uint8](set uint8, forms ...F) []F {
	var out []F
	var known uint8
	for _, f := range forms {
		known |= uint8(f)
		if set&uint8(f) != 0 {
			out = append(out, f)
		}
	}
	if set&^known != 0 {
		panic(fmt.Sprintf("forms %#x: unknown bits %#x", set, set&^known))
	}
	return out
}

// shapeEncoder writes msgpack descriptions (msgdesc_test.go) of events as
// row s sends them.
type shapeEncoder struct {
	s      shape
	hashes hashForm
	tokens tokenForm
	salt   saltPlace
}

func (e shapeEncoder) hash(h uint64) string {
	switch e.hashes {
	case hashInt:
		return fmt.Sprintf("i64(%d)", int64(h))
	case hashBin:
		return fmt.Sprintf("bin(%s%016x)", strings.Repeat("ab", 24), h)
	}
	return fmt.Sprintf("u64(%d)", h)
}

// tokenList encodes the tokens first, first+1, ... of n blocks of 16.
func (e shapeEncoder) tokenList(first, n int) string {
	switch e.tokens {
	case tokenBigrams:
		return fmt.Sprintf("[pairs(%d, %d)]", first, 16*n-1)
	case tokenBigramsPerPosition:
		return fmt.Sprintf("[pairs(%d, %d)]", first, 16*n)
	}
	return fmt.Sprintf("[seq(%d, %d)]", first, 16*n)
}

// storedValue returns the value of field f of a BlockStored.
func (e shapeEncoder) storedValue(f field, hashes []uint64, parent uint64, hasParent bool, first int, salted bool) string {
	salt := func(p saltPlace, yes, no string) string {
		if salted && e.salt == p {
			return yes
		}
		return no
	}
	switch f {
	case fBlockHashes:
		var hs []string
		for _, h := range hashes {
			hs = append(hs, e.hash(h))
		}
		return "[" + strings.Join(hs, ", ") + "]"
	case fParent:
		if !hasParent {
			return "nil"
		}
		return e.hash(parent)
	case fTokens:
		return e.tokenList(first, len(hashes))
	case fBlockSize:
		return "16"
	case fMedium:
		return `"GPU"`
	case fLoRAName:
		return salt(saltLoRASlot, `{"cache_salt": "tenant"}`, "nil")
	case fExtraKeys:
		return "[" + salt(saltExtraKeys, `["tenant"]`, "nil") + strings.Repeat(", nil", len(hashes)-1) + "]"
	case fGroup:
		return "0"
	case fKind:
		return `"full_attention"`
	case fLocality:
		return `"LOCAL"`
	case fCacheSalt:
		return salt(saltKey, `"tenant"`, "nil")
	}
	return "nil" // lora_id, kv_cache_spec_sliding_window
}

func (e shapeEncoder) stored(hashes []uint64, parent uint64, hasParent bool, first int, salted bool) string {
	var vals []string
	for _, f := range mustFields(e.s, e.s.stored) {
		vals = append(vals, e.storedValue(f, hashes, parent, hasParent, first, salted))
	}
	return e.event(tagStored, e.s.stored, vals)
}

func (e shapeEncoder) removed(h uint64) string {
	var vals []string
	for _, f := range mustFields(e.s, e.s.removed) {
		if f == fBlockHashes {
			vals = append(vals, "["+e.hash(h)+"]")
		} else {
			vals = append(vals, e.storedValue(f, nil, 0, false, 0, false))
		}
	}
	return e.event(tagRemoved, e.s.removed, vals)
}

func (e shapeEncoder) tagOnly(t eventTag) string { return e.event(t, "", nil) }

// event encodes a tagged array or a tagged map of the named fields' values.
func (e shapeEncoder) event(t eventTag, fields string, vals []string) string {
	names := strings.Fields(fields)
	if e.s.events == taggedArray {
		return "[" + strings.Join(append([]string{fmt.Sprintf("%q", t.String())}, vals...), ", ") + "]"
	}
	parts := []string{fmt.Sprintf("%q: %q", mapTagKey, t.String())}
	for i, v := range vals {
		parts = append(parts, fmt.Sprintf("%q: %s", names[i], v))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// batch encodes ts 1.5, the events and rank 2.
func (e shapeEncoder) batch(bf batchForm, events ...string) string {
	evs := "[" + strings.Join(events, ", ") + "]"
	if bf == batchMap {
		return fmt.Sprintf(`{"ts": 1.5, "events": %s, %q: 2}`, evs, e.s.rank)
	}
	return fmt.Sprintf("[1.5, %s, 2]", evs)
}
