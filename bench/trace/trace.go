// Package trace reads Mooncake-format request traces and turns them into
// engine traffic: each block id expands into as many deterministic tokens as
// it stands for (512 in Mooncake's traces, any positive count with
// ParseBlocks), so equal ids give equal tokens at any engine block size.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
)

// IDTokens is the number of prompt tokens one block id of a Mooncake trace
// stands for, the default of Load and Parse.
const IDTokens = 512

// Vocab bounds the token ids produced by expansion.
const Vocab = 128000

// Request is one trace line.
type Request struct {
	// Arrival is the offset from the start of the trace.
	Arrival      time.Duration
	InputLength  int
	OutputLength int
	HashIDs      []uint64
	// BlockTokens is the number of prompt tokens one hash id stands for;
	// 0 means IDTokens (512).
	BlockTokens int
}

// IDBlockTokens is the number of prompt tokens one of r's hash ids stands for.
func (r Request) IDBlockTokens() int {
	if r.BlockTokens > 0 {
		return r.BlockTokens
	}
	return IDTokens
}

type line struct {
	Timestamp    *float64  `json:"timestamp"`
	InputLength  *int      `json:"input_length"`
	OutputLength *int      `json:"output_length"`
	HashIDs      *[]uint64 `json:"hash_ids"`
}

// Load reads at most limit requests (0: all) from a JSONL file whose ids
// stand for 512-token blocks.
func Load(path string, limit int) ([]Request, error) {
	return LoadBlocks(path, limit, IDTokens)
}

// LoadBlocks is Load for a trace whose ids stand for blockTokens tokens.
func LoadBlocks(path string, limit, blockTokens int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load trace: %w", err)
	}
	defer f.Close()
	reqs, err := ParseBlocks(f, limit, blockTokens)
	if err != nil {
		return nil, fmt.Errorf("load trace %s: %w", path, err)
	}
	return reqs, nil
}

// Parse reads at most limit requests (0: all) from JSONL. Blank lines are
// skipped; any other malformed line is an error naming the line. Requests are
// returned in arrival order (stable for equal timestamps). Each id stands for
// a 512-token block.
func Parse(r io.Reader, limit int) ([]Request, error) {
	return ParseBlocks(r, limit, IDTokens)
}

// ParseBlocks is Parse for a trace whose ids stand for blockTokens tokens:
// a line must carry ceil(input_length / blockTokens) hash ids.
func ParseBlocks(r io.Reader, limit, blockTokens int) ([]Request, error) {
	if blockTokens <= 0 {
		return nil, fmt.Errorf("block tokens %d: want a positive count", blockTokens)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []Request
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch {
		case l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil || l.HashIDs == nil:
			return nil, fmt.Errorf("line %d: missing one of timestamp, input_length, output_length, hash_ids", n)
		case *l.Timestamp < 0:
			return nil, fmt.Errorf("line %d: negative timestamp %v", n, *l.Timestamp)
		case *l.InputLength <= 0:
			return nil, fmt.Errorf("line %d: input_length %d is not positive", n, *l.InputLength)
		case *l.OutputLength < 0:
			return nil, fmt.Errorf("line %d: negative output_length %d", n, *l.OutputLength)
		case len(*l.HashIDs) != (*l.InputLength+blockTokens-1)/blockTokens:
			return nil, fmt.Errorf("line %d: %d hash_ids for input_length %d, want %d (%d-token blocks)",
				n, len(*l.HashIDs), *l.InputLength, (*l.InputLength+blockTokens-1)/blockTokens, blockTokens)
		}
		out = append(out, Request{
			Arrival:      time.Duration(*l.Timestamp * float64(time.Millisecond)),
			InputLength:  *l.InputLength,
			OutputLength: *l.OutputLength,
			HashIDs:      *l.HashIDs,
			BlockTokens:  blockTokens,
		})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival < out[j].Arrival })
	return out, nil
}

// splitmix64 is a fast, well-mixed bijection on uint64.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// IDToken is token i (0 <= i < IDTokens) of block id.
func IDToken(id uint64, i int) uint32 {
	return idToken(id, i, IDTokens)
}

// idToken is token i of block id where ids stand for blockTokens tokens. Ids
// are spaced max(blockTokens, 512) apart in splitmix64's input, so ids of
// 512 tokens or fewer expand to a prefix of what IDToken gives and distinct
// ids never share an input.
func idToken(id uint64, i, blockTokens int) uint32 {
	stride := uint64(max(blockTokens, IDTokens))
	return uint32(splitmix64(id*stride+uint64(i)) % Vocab)
}

// Tokens appends the request's prompt tokens to dst: IDBlockTokens tokens
// per hash id, the last id cut to InputLength - IDBlockTokens*(len(HashIDs)-1).
func (r Request) Tokens(dst []uint32) []uint32 {
	b := r.IDBlockTokens()
	for k, id := range r.HashIDs {
		n := b
		if k == len(r.HashIDs)-1 {
			n = r.InputLength - b*(len(r.HashIDs)-1)
		}
		for i := 0; i < n; i++ {
			dst = append(dst, idToken(id, i, b))
		}
	}
	return dst
}

// Ceiling is the hit rate of one pooled LRU cache over a trace.
type Ceiling struct {
	PromptBlocks uint64
	CachedBlocks uint64
}

// HitRate is CachedBlocks / PromptBlocks.
func (c Ceiling) HitRate() float64 {
	if c.PromptBlocks == 0 {
		return 0
	}
	return float64(c.CachedBlocks) / float64(c.PromptBlocks)
}

// PooledCeiling replays reqs in order through one LRU cache of capacity
// blocks of blockSize tokens, with the same cache policy as a simulated
// engine, and counts leading cached blocks. capacity <= 0 means unlimited.
func PooledCeiling(reqs []Request, blockSize, capacity int) Ceiling {
	unlimited := capacity <= 0
	if unlimited {
		for _, r := range reqs {
			capacity += r.InputLength/blockSize + 1
		}
	}
	c := engine.NewCache(capacity)
	var (
		out    Ceiling
		toks   []uint32
		hashes []uint64
		evict  []uint64
	)
	for _, r := range reqs {
		toks = r.Tokens(toks[:0])
		hashes = engine.ChainHashes(0, blockSize, toks, hashes[:0])
		hit, _, ev := c.Access(hashes, evict[:0])
		evict = ev
		out.PromptBlocks += uint64(len(hashes))
		out.CachedBlocks += uint64(hit)
	}
	return out
}

// IDHitRate is the fraction of hash id references that are prefix hits with
// one unlimited cache at the trace's own granularity (one id, one block).
func IDHitRate(reqs []Request) float64 {
	seen := make(map[uint64]struct{})
	var refs, hits int
	for _, r := range reqs {
		prefix := true
		for _, id := range r.HashIDs {
			refs++
			if _, ok := seen[id]; ok && prefix {
				hits++
			} else {
				prefix = false
			}
			seen[id] = struct{}{}
		}
	}
	if refs == 0 {
		return 0
	}
	return float64(hits) / float64(refs)
}
