package normalize

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvrouter/kvrouter/internal/kv"
)

var genCorpus = flag.Bool("gen-corpus", false, "write testdata/fuzz/FuzzDecodeBatch from the golden cases")

// casePayloads returns every payload of the golden cases, in file order.
func casePayloads(tb testing.TB) [][]byte {
	files, err := filepath.Glob("testdata/cases/*.txt")
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		// Every command "passes" (returns its expected output): this only
		// collects the inputs.
		datadriven.RunTestFromStringAny(tb, string(data), func(tb testing.TB, td *datadriven.TestData) string {
			if td.Cmd == "payload" || td.Cmd == "hex" {
				p, err := casePayload(td)
				if err != nil {
					tb.Fatalf("%s: %s: %v", f, td.Pos, err)
				}
				out = append(out, p)
			}
			return td.Expected
		})
	}
	return out
}

// TestGenCorpus writes the seed corpus of FuzzDecodeBatch (with -gen-corpus).
func TestGenCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("corpus generation runs only with -gen-corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatch")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, p := range casePayloads(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", p)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("case%03d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func addSeeds(f *testing.F) {
	for _, p := range casePayloads(f) {
		f.Add(p)
	}
}

// FuzzDecodeBatch: no input panics; errors are *decodeError and leave no
// events; a decode is deterministic and independent of the reused memory.
func FuzzDecodeBatch(f *testing.F) {
	addSeeds(f)
	var reused rawBatch
	f.Fuzz(func(t *testing.T, data []byte) {
		var fresh rawBatch
		err := decodeBatch(data, &fresh)
		err2 := decodeBatch(data, &reused)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("reused batch decodes differently: %v vs %v", err, err2)
		}
		if err != nil {
			var de *decodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *decodeError: %v", err, err)
			}
			if len(fresh.Events) != 0 || len(reused.Events) != 0 {
				t.Fatalf("events left after error %v", err)
			}
			return
		}
		if d := diffRaw(&fresh, &reused, true); d != "" {
			t.Fatalf("reused batch decodes differently: %s", d)
		}
		for i, ev := range fresh.Events {
			if ev.Err != nil && ev.Err.index != i {
				t.Fatalf("event %d has error of event %d", i, ev.Err.index)
			}
		}
	})
}

// FuzzNormalize: no input panics, every decoded event is either emitted or
// skipped with a reason, and stores are well formed.
func FuzzNormalize(f *testing.F) {
	addSeeds(f)
	small := New(Config{BlockSize: 4})
	small.maxNS = 8
	ns := []*Normalizer{New(Config{}), small}
	var b Batch
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, n := range ns {
			for range 2 {
				checkNormalize(t, n, data, &b)
			}
		}
	})
}

func checkNormalize(t *testing.T, n *Normalizer, data []byte, b *Batch) {
	err := n.Normalize(data, b)
	if err != nil {
		if len(b.Events) != 0 || len(b.Errors) != 0 {
			t.Fatalf("batch not empty after %v", err)
		}
		return
	}
	var tags, skipped uint32
	for _, c := range b.tags {
		tags += c
	}
	for _, c := range b.Skipped {
		skipped += c
	}
	if uint32(len(b.Events))+skipped+b.held != tags {
		t.Fatalf("%d events emitted + %d skipped + %d held != %d decoded", len(b.Events), skipped, b.held, tags)
	}
	if uint32(len(b.Errors)) != min(b.Skipped[reasonMalformedEvent], uint32(n.maxErrors)) {
		t.Fatalf("%d errors for %d malformed events", len(b.Errors), b.Skipped[reasonMalformedEvent])
	}
	var blocks uint32
	for _, ev := range b.Events {
		switch ev.Kind {
		case KindStore:
			if len(ev.Blocks) == 0 || len(ev.EngineHashes) != 0 {
				t.Fatalf("bad store %+v", ev)
			}
			blocks += uint32(len(ev.Blocks))
		case KindStoreTier, KindRemove:
			if len(ev.EngineHashes) == 0 || len(ev.Blocks) != 0 {
				t.Fatalf("bad %d event %+v", ev.Kind, ev)
			}
		case KindClear:
		default:
			t.Fatalf("unknown kind %d", ev.Kind)
		}
		if ev.Tier > kv.TierExternal {
			t.Fatalf("bad tier %d", ev.Tier)
		}
	}
	if blocks != b.routerBlocks {
		t.Fatalf("Blocks=%d, counted %d", b.routerBlocks, blocks)
	}
	if n.namespacedBlocks() > n.maxNS {
		t.Fatalf("%d namespaces over the bound %d", n.namespacedBlocks(), n.maxNS)
	}
}

// FuzzDifferential: the hand-written reader and shamaton/msgpack accept and
// reject the same payloads and decode the same values.
func FuzzDifferential(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return // shamaton decodes recursively; keep its stack modest
		}
		var a, b rawBatch
		errA := decodeBatch(data, &a)
		var errB error
		panicked := func() (p bool) {
			defer func() {
				if recover() != nil {
					p = true
				}
			}()
			errB = decodeBatchShamaton(data, &b)
			return false
		}()
		if panicked {
			// shamaton panics on a bin map key (unhashable []byte in a
			// map[any]any); decodeBatch ignores such keys. Nothing to compare.
			return
		}
		if (errA == nil) != (errB == nil) {
			t.Fatalf("accept/reject differs: hand-written %v, shamaton %v (payload %x)", errA, errB, data)
		}
		if errA != nil {
			return
		}
		if d := diffRaw(&a, &b, false); d != "" {
			t.Fatalf("values differ: %s (payload %x)", d, data)
		}
	})
}

// diffRaw describes the first difference between two decoded batches.
// exactErr also compares error messages and offsets.
func diffRaw(a, b *rawBatch, exactErr bool) string {
	if math.Float64bits(a.TS) != math.Float64bits(b.TS) && !(math.IsNaN(a.TS) && math.IsNaN(b.TS)) {
		return fmt.Sprintf("ts %v vs %v", a.TS, b.TS)
	}
	if a.DPRank != b.DPRank {
		return fmt.Sprintf("dp_rank %d vs %d", a.DPRank, b.DPRank)
	}
	if len(a.Events) != len(b.Events) {
		return fmt.Sprintf("%d vs %d events", len(a.Events), len(b.Events))
	}
	for i := range a.Events {
		x, y := &a.Events[i], &b.Events[i]
		if d := diffEvent(x, y, exactErr); d != "" {
			return fmt.Sprintf("event %d: %s", i, d)
		}
	}
	return ""
}

func diffEvent(x, y *rawEvent, exactErr bool) string {
	if x.Tag != y.Tag || !bytes.Equal(x.Name, y.Name) {
		return fmt.Sprintf("tag %v %q vs %v %q", x.Tag, x.Name, y.Tag, y.Name)
	}
	if (x.Err == nil) != (y.Err == nil) {
		return fmt.Sprintf("error %v vs %v", x.Err, y.Err)
	}
	if x.Err != nil {
		if x.Err.index != y.Err.index || x.Err.field != y.Err.field {
			return fmt.Sprintf("error %v vs %v", x.Err, y.Err)
		}
		if exactErr && x.Err.Error() != y.Err.Error() {
			return fmt.Sprintf("error %v vs %v", x.Err, y.Err)
		}
		return ""
	}
	switch {
	case !slices.Equal(x.BlockHashes, y.BlockHashes):
		return fmt.Sprintf("block_hashes %v vs %v", x.BlockHashes, y.BlockHashes)
	case x.HasParent != y.HasParent || x.Parent != y.Parent:
		return "parent"
	case !slices.Equal(x.Tokens, y.Tokens): // nil and empty both mean no tokens
		return fmt.Sprintf("tokens %v vs %v", x.Tokens, y.Tokens)
	case x.Bigram != y.Bigram:
		return "bigram"
	case x.BlockSize != y.BlockSize:
		return "block_size"
	case !bytes.Equal(x.Medium, y.Medium):
		return "medium"
	case !bytes.Equal(x.LoRAName, y.LoRAName):
		return "lora_name"
	case x.HasCacheSalt != y.HasCacheSalt || !bytes.Equal(x.CacheSalt, y.CacheSalt):
		return "cache_salt"
	case x.HasGroup != y.HasGroup || x.Group != y.Group:
		return "group_idx"
	case x.HasKind != y.HasKind || !bytes.Equal(x.SpecKind, y.SpecKind):
		return "kv_cache_spec_kind"
	case x.HasWindow != y.HasWindow || x.SlidingWindow != y.SlidingWindow:
		return "sliding_window"
	case !bytes.Equal(x.Locality, y.Locality):
		return "locality"
	case (x.ExtraKeys == nil) != (y.ExtraKeys == nil) || len(x.ExtraKeys) != len(y.ExtraKeys):
		return fmt.Sprintf("extra_keys %v vs %v", x.ExtraKeys, y.ExtraKeys)
	}
	for i := range x.ExtraKeys {
		p, q := x.ExtraKeys[i], y.ExtraKeys[i]
		if p.Present != q.Present || len(p.Items) != len(q.Items) {
			return fmt.Sprintf("extra_keys[%d]", i)
		}
		for j := range p.Items {
			s, u := p.Items[j], q.Items[j]
			if s.Kind != u.Kind || s.Int != u.Int || !bytes.Equal(s.Str, u.Str) {
				return fmt.Sprintf("extra_keys[%d][%d] %+v vs %+v", i, j, s, u)
			}
		}
	}
	return ""
}
