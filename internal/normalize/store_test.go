package normalize

import (
	"slices"
	"testing"
)

// TestBlockTokens: a store's tokens must be blocks x block size, after
// dropping the extra token of one-bigram-per-position EAGLE keys; without a
// block size it is inferred from the token count.
func TestBlockTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ev      rawEvent
		tokens  int // want: tokens kept; -1: malformed
		bs      int
		errText string
	}{
		{"exact", rawEvent{BlockHashes: []uint64{1, 2}, Tokens: seqTokens(1, 32), BlockSize: 16}, 32, 16, ""},
		{"inferred", rawEvent{BlockHashes: []uint64{1, 2}, Tokens: seqTokens(1, 64), BlockSize: -1}, 64, 32, ""},
		{"bigram per position", rawEvent{BlockHashes: []uint64{1, 2}, Tokens: seqTokens(1, 33), Bigram: true, BlockSize: 16}, 32, 16, ""},
		{"bigram per position, inferred", rawEvent{BlockHashes: []uint64{1, 2}, Tokens: seqTokens(1, 33), Bigram: true, BlockSize: -1}, 32, 16, ""},
		{"one extra token without bigrams", rawEvent{BlockHashes: []uint64{1}, Tokens: seqTokens(1, 17), BlockSize: 16}, -1, 0,
			"event 0: token_ids: 17 tokens, want 1 blocks x 16"},
		{"no blocks, no block size", rawEvent{Tokens: seqTokens(1, 16), BlockSize: -1}, -1, 0,
			"event 0: token_ids: 16 tokens is not a multiple of 0 blocks and block_size is absent"},
	} {
		var b Batch
		toks, bs, ok := blockTokens(&tc.ev, 0, &b)
		if tc.tokens < 0 {
			if ok || len(b.Errors) != 1 || b.Errors[0].Error() != tc.errText || b.Skipped[reasonMalformedEvent] != 1 {
				t.Errorf("%s: ok %v, errors %v; want %q", tc.name, ok, b.Errors, tc.errText)
			}
			continue
		}
		if !ok || len(toks) != tc.tokens || bs != tc.bs || !slices.Equal(toks, tc.ev.Tokens[:tc.tokens]) {
			t.Errorf("%s: %d tokens, block size %d, ok %v; want %d, %d", tc.name, len(toks), bs, ok, tc.tokens, tc.bs)
		}
	}
}

// TestDroppedStoreLeavesState: a store dropped for any reason changes
// neither the learned engine block size nor the remembered namespaces.
func TestDroppedStoreLeavesState(t *testing.T) {
	for _, tc := range []struct {
		name, store string
		want        Reason
	}{
		{"block size mismatch", `["BlockStored", [5], nil, [seq(1, 24)], 24, nil, nil, nil, [["s"]]]`, reasonBlockSizeMismatch},
		{"repeated hash", `["BlockStored", [5, 5], nil, [seq(1, 64)], 32, nil, nil, nil, [["s"], nil]]`, reasonInvalidBlockSequence},
		{"own parent", `["BlockStored", [5], 5, [seq(1, 32)], 32, nil, nil, nil, [["s"]]]`, reasonInvalidBlockSequence},
		{"ambiguous parent", `["BlockStored", [5], 2, [seq(1, 32)], 32]`, reasonAmbiguousCacheNamespace},
		{"token count", `["BlockStored", [5], nil, [seq(1, 31)], 32, nil, nil, nil, [["s"]]]`, reasonMalformedEvent},
		{"remote", `["BlockStored", [5], nil, [seq(1, 32)], 32, nil, nil, nil, [["s"]], 0, "full_attention", nil, "REMOTE"]`, reasonRemoteLocality},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := New(Config{})
			var b Batch
			// Block 1 under "a", block 2 under "a" and "b" (ambiguous).
			setup := `[1.0, [["BlockStored", [1, 2], nil, [seq(1, 32)], 16, nil, nil, nil, [["a"], nil]],
				["BlockStored", [2], nil, [seq(1, 16)], 16, nil, nil, nil, [["b"]]]]]`
			if err := n.Normalize(mustDesc(t, setup), &b); err != nil {
				t.Fatal(err)
			}
			before := len(n.ns)
			if err := n.Normalize(mustDesc(t, `[2.0, [`+tc.store+`]]`), &b); err != nil {
				t.Fatal(err)
			}
			if b.Skipped[tc.want] != 1 || len(b.Events) != 0 {
				t.Fatalf("skipped %v, %d events; want one %v", b.Skipped, len(b.Events), tc.want)
			}
			if n.engineBlockSize != 16 || len(n.ns) != before {
				t.Errorf("state changed: engine block size %d, %d namespaces (was %d)", n.engineBlockSize, len(n.ns), before)
			}
		})
	}
}

// TestStoredTier: a store without tokens adds its tier to blocks known by
// engine hash, split by its own block size or else the learned one.
func TestStoredTier(t *testing.T) {
	n := New(Config{})
	var b Batch
	p := `[1.0, [["BlockStored", [1], nil, [seq(1, 32)], 32],
		["BlockStored", [1], nil, [], nil, nil, "CPU"],
		["BlockStored", [1], nil, nil, 16, nil, "DISK"]]]`
	if err := n.Normalize(mustDesc(t, p), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 3 {
		t.Fatalf("%d events", len(b.Events))
	}
	if ev := b.Events[1]; ev.Kind != KindStoreTier || !slices.Equal(ev.EngineHashes, []uint64{splitHash(1, 0), 1}) {
		t.Errorf("learned block size: %+v", ev)
	}
	if ev := b.Events[2]; ev.Kind != KindStoreTier || !slices.Equal(ev.EngineHashes, []uint64{1}) {
		t.Errorf("own block size: %+v", ev)
	}
}
