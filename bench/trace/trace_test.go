package trace

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

const sharedTrace = "../../../shared/traces/conversation_trace.jsonl"

func TestParse(t *testing.T) {
	in := `{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}

{"timestamp": 3, "input_length": 512, "output_length": 0, "hash_ids": [1]}
`
	reqs, err := Parse(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Arrival != 3*time.Millisecond || reqs[1].InputLength != 600 || len(reqs[1].HashIDs) != 2 {
		t.Fatalf("%+v", reqs)
	}
	if reqs, _ := Parse(strings.NewReader(in), 1); len(reqs) != 1 || reqs[0].Arrival != 10*time.Millisecond {
		t.Fatalf("limit: %+v", reqs)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}`, "line 1: 1 hash_ids for input_length 600, want 2"},
		{`{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}`, "input_length 0 is not positive"},
		{`{"timestamp": 0, "output_length": 5, "hash_ids": [1]}`, "missing one of"},
		{"{}\n{not json", "line 1: missing"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\n{not json", "line 2:"},
		{`{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "negative timestamp"},
		{`{"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": [1]}`, "negative output_length"},
		{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [-1]}`, "line 1:"},
	} {
		_, err := Parse(strings.NewReader(tc.in), 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestTokens(t *testing.T) {
	a := Request{InputLength: 1000, HashIDs: []uint64{7, 8}}.Tokens(nil)
	b := Request{InputLength: 700, HashIDs: []uint64{7, 9}}.Tokens(nil)
	c := Request{InputLength: 520, HashIDs: []uint64{7, 8}}.Tokens(nil)
	if len(a) != 1000 || len(b) != 700 || len(c) != 520 {
		t.Fatalf("lengths %d %d %d", len(a), len(b), len(c))
	}
	for i := 0; i < 512; i++ {
		if a[i] != b[i] {
			t.Fatalf("shared id 7 expands differently at %d", i)
		}
	}
	// Same id, shorter tail: a prefix of the longer expansion.
	for i := range c {
		if c[i] != a[i] {
			t.Fatalf("tail of id 8 differs at %d", i)
		}
	}
	same := 0
	for i := 512; i < 700; i++ {
		if a[i] == b[i] {
			same++
		}
		if a[i] >= Vocab {
			t.Fatalf("token %d out of vocab", a[i])
		}
	}
	if same > 5 {
		t.Fatalf("different ids share %d of 188 tokens", same)
	}
}

func TestPooledCeiling(t *testing.T) {
	// Block size 256: each id is two blocks. A (ids 1,2) then B (1,3) then A.
	reqs := []Request{
		{InputLength: 1024, HashIDs: []uint64{1, 2}},
		{InputLength: 1024, HashIDs: []uint64{1, 3}},
		{InputLength: 1024, HashIDs: []uint64{1, 2}},
	}
	for _, tc := range []struct {
		capacity int
		cached   uint64
	}{
		{0, 2 + 4}, // unlimited: B hits id 1 (2 blocks), A again hits all 4
		{6, 2 + 4}, // room for everything
		{4, 2 + 2}, // B evicts A's tail; A again hits id 1 only
		{2, 2 + 2}, // each prompt keeps only its head (id 1)
	} {
		c := PooledCeiling(reqs, 256, tc.capacity)
		if c.PromptBlocks != 12 || c.CachedBlocks != tc.cached {
			t.Errorf("capacity %d: %+v, want 12 prompt and %d cached", tc.capacity, c, tc.cached)
		}
	}
	// Partial tail blocks are not prompt blocks.
	if c := PooledCeiling([]Request{{InputLength: 300, HashIDs: []uint64{1}}}, 256, 0); c.PromptBlocks != 1 {
		t.Errorf("partial block counted: %+v", c)
	}
	if c := (Ceiling{}); c.HitRate() != 0 {
		t.Error("empty hit rate")
	}
}

// TestConversationTrace checks parsing and expansion against the figures the
// trace's README states.
func TestConversationTrace(t *testing.T) {
	if _, err := os.Stat(sharedTrace); err != nil {
		t.Skipf("shared trace not present at %s: %v", sharedTrace, err)
	}
	reqs, err := Load(sharedTrace, 0)
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, r := range reqs {
		refs += len(r.HashIDs)
	}
	if len(reqs) != 12031 || refs != 288500 {
		t.Fatalf("%d requests, %d refs; README says 12031 and 288500", len(reqs), refs)
	}
	if got := IDHitRate(reqs); math.Abs(got-0.366) > 0.0005 {
		t.Fatalf("unlimited id hit rate %.4f, README says 36.6%%", got)
	}
	// At 512-token blocks the token-level ceiling sees the same sharing
	// (partial last blocks aside) on a prefix of the trace.
	head := reqs[:1500]
	c := PooledCeiling(head, 512, 0)
	full := 0
	var hits int
	seen := map[uint64]bool{}
	for _, r := range head {
		n := r.InputLength / 512
		full += n
		for i := 0; i < n && seen[r.HashIDs[i]]; i++ {
			hits++
		}
		for _, id := range r.HashIDs[:n] {
			seen[id] = true
		}
	}
	if c.PromptBlocks != uint64(full) || c.CachedBlocks != uint64(hits) {
		t.Fatalf("token-level ceiling %+v, id-level %d/%d", c, hits, full)
	}
}

func TestParseBlocks(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}`
	if _, err := Parse(strings.NewReader(in), 0); err == nil {
		t.Fatal("3 ids for 40 tokens accepted at 512-token blocks")
	}
	reqs, err := ParseBlocks(strings.NewReader(in), 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	if r := reqs[0]; r.BlockTokens != 16 || r.IDBlockTokens() != 16 || len(r.Tokens(nil)) != 40 {
		t.Fatalf("%+v, %d tokens", r, len(r.Tokens(nil)))
	}
	if _, err := ParseBlocks(strings.NewReader(in), 0, 0); err == nil {
		t.Fatal("0-token blocks accepted")
	}
	big := `{"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2]}`
	if _, err := ParseBlocks(strings.NewReader(big), 0, 1024); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBlocks(strings.NewReader(big), 0, 512); err == nil || !strings.Contains(err.Error(), "want 3 (512-token blocks)") {
		t.Fatalf("err %v", err)
	}
}

func TestTokensOtherBlockSizes(t *testing.T) {
	// Ids of 512 tokens or fewer expand to a prefix of the 512-token expansion.
	small := Request{InputLength: 32, HashIDs: []uint64{7, 8}, BlockTokens: 16}.Tokens(nil)
	for i := 0; i < 16; i++ {
		if small[i] != IDToken(7, i) || small[16+i] != IDToken(8, i) {
			t.Fatalf("16-token id expansion differs from IDToken at %d", i)
		}
	}
	// Ids of more than 512 tokens: consecutive ids must not overlap (with a
	// 512 stride, id 7's tokens 512.. would be id 8's tokens 0..).
	a := Request{InputLength: 1024, HashIDs: []uint64{7}, BlockTokens: 1024}.Tokens(nil)
	b := Request{InputLength: 1024, HashIDs: []uint64{8}, BlockTokens: 1024}.Tokens(nil)
	if len(a) != 1024 || len(b) != 1024 {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	same := 0
	for i := 0; i < 512; i++ {
		if a[512+i] == b[i] {
			same++
		}
	}
	if same > 5 {
		t.Fatalf("id 7's second half equals id 8's first half at %d of 512 tokens", same)
	}
	// The last id is cut to the input length.
	c := Request{InputLength: 1100, HashIDs: []uint64{7, 9}, BlockTokens: 1024}.Tokens(nil)
	if len(c) != 1100 || c[1023] != a[1023] {
		t.Fatalf("cut expansion: %d tokens", len(c))
	}
}
