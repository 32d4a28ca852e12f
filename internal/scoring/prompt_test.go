package scoring

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
)

func TestPromptErrors(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxPromptTokens = 64 })
	f.addWorker("a", "m", 1)
	for _, tc := range []struct {
		name string
		p    Prompt
		want error
		text string
	}{
		{"empty", Prompt{Model: "m"}, ErrInvalidArgument, "empty"},
		{"both", Prompt{Model: "m", Tokens: tokens(1, 16), BlockHashes: []uint64{1}}, ErrInvalidArgument, "both"},
		{"too long", Prompt{Model: "m", Tokens: tokens(1, 65)}, ErrInvalidArgument, "max-prompt-tokens"},
		{"too many hashes", Prompt{Model: "m", BlockHashes: make([]uint64, 5)}, ErrInvalidArgument, "block_hashes"},
		{"no model", Prompt{Tokens: tokens(1, 16)}, ErrInvalidArgument, "model"},
		{"mm empty hash", Prompt{Model: "m", Tokens: tokens(1, 32), MM: []MMItem{{Length: 4}}}, ErrInvalidArgument, "mm_items[0].hash"},
		{"mm out of range", Prompt{Model: "m", Tokens: tokens(1, 32), MM: []MMItem{{Hash: "img", Offset: 30, Length: 4}}}, ErrInvalidArgument, "mm_items[0]"},
		{"mm with hashes", Prompt{Model: "m", BlockHashes: []uint64{1}, MM: []MMItem{{Hash: "img", Length: 1}}}, ErrInvalidArgument, "mm_items"},
		{"unknown model", Prompt{Model: "nope", Tokens: tokens(1, 16)}, ErrNotFound, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.r.Route(&tc.p, "", 0, 0)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Route: %v; want %v mentioning %q", err, tc.want, tc.text)
			}
			if _, err := f.r.Score(&tc.p); !errors.Is(err, tc.want) {
				t.Fatalf("Score: %v; want %v", err, tc.want)
			}
		})
	}
	if _, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(1, 16)}, "", -1, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative temperature: %v", err)
	}
}

func TestMultimodalItemsChangeHashes(t *testing.T) {
	f := newFixture(t, nil)
	f.addWorker("a", "m", 1)
	toks := tokens(1, 4*bs)
	f.store("a", 0, toks, 4, kv.TierDevice)
	res, err := f.r.Score(&Prompt{Model: "m", Tokens: toks, MM: []MMItem{{Hash: "image-1", Offset: 2 * bs, Length: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Scores[0].Matched; m != 2 {
		t.Fatalf("matched %d; want 2 (the image in block 2 changes its hash)", m)
	}
}
