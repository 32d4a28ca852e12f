package normalize

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestBlockHashSpec checks BlockHash against the README's hash specification, written out with an
// explicit little-endian encoding and a streaming seeded XXH64.
func TestBlockHashSpec(t *testing.T) {
	for _, c := range []struct {
		tokens []uint32
		mm     []uint64
	}{
		{nil, nil},
		{[]uint32{1}, nil},
		{[]uint32{0, 1, 0xffffffff, 151643}, nil},
		{seqTokens(1, 16), nil},
		{seqTokens(1, 16), []uint64{0x0123456789abcdef}},
		{seqTokens(1000, 100), []uint64{1, 2, 3}}, // longer than BlockHash's portable buffer
	} {
		for _, seed := range []uint64{0, Seed("", ""), Seed("lora", "ns")} {
			var buf []byte
			for _, tok := range c.tokens {
				buf = binary.LittleEndian.AppendUint32(buf, tok)
			}
			for _, h := range c.mm {
				buf = binary.LittleEndian.AppendUint64(buf, h)
			}
			d := xxhash.NewWithSeed(seed)
			d.Write(buf)
			if got, want := BlockHash(seed, c.tokens, c.mm), d.Sum64(); got != want {
				t.Errorf("BlockHash(%#x, %v, %v) = %#x, want %#x", seed, c.tokens, c.mm, got, want)
			}
		}
	}
	// Seed: XXH64 of XXH64(lora) || XXH64(ns), little-endian.
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], xxhash.Sum64String("a"))
	binary.LittleEndian.PutUint64(b[8:], xxhash.Sum64String("b"))
	if Seed("a", "b") != xxhash.Sum64(b[:]) || Seed("a", "b") == Seed("b", "a") || Seed("ab", "") == Seed("a", "b") {
		t.Error("Seed does not follow the README's hash specification")
	}
	// Dynamo's salt prefix is not part of the namespace, on the request path
	// as on the event path.
	if Seed("", "dynamo-cache-salt:tenant") != Seed("", "tenant") {
		t.Error("Seed hashes the dynamo-cache-salt: prefix")
	}
}

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func TestMMHash(t *testing.T) {
	hex64 := "0123456789abcdef" + "00112233445566778899aabbccddeeff" + "fedcba9876543210"
	for _, c := range []struct {
		id   string
		want uint64
	}{
		{hex64, 0x0123456789abcdef},
		{"0123456789ABCDEF" + hex64[16:], 0x0123456789abcdef},
		{hex64[:63], xxhash.Sum64String(hex64[:63])},
		{hex64[:63] + "g", xxhash.Sum64String(hex64[:63] + "g")},
		{"img-77", xxhash.Sum64String("img-77")},
		{"", xxhash.Sum64String("")},
	} {
		if got := MMHash(c.id); got != c.want {
			t.Errorf("MMHash(%q) = %#x, want %#x", c.id, got, c.want)
		}
		if got := mmHashBytes([]byte(c.id)); got != c.want {
			t.Errorf("mmHashBytes(%q) = %#x, want %#x", c.id, got, c.want)
		}
	}
}

func TestHashPrompt(t *testing.T) {
	seed := Seed("", "s")
	toks := seqTokens(1, 50)                       // 3 full blocks of 16, a tail of 2
	img := MMItem{Hash: 7, Offset: 10, Length: 10} // tokens [10, 20): blocks 0 and 1
	aud := MMItem{Hash: 9, Offset: 32, Length: 1}  // token 32: block 2
	empty := MMItem{Hash: 11, Offset: 0, Length: 0}
	got := HashPrompt(seed, toks, 16, []MMItem{img, aud, empty}, []uint64{42})
	want := []uint64{42,
		BlockHash(seed, toks[0:16], []uint64{7}),
		BlockHash(seed, toks[16:32], []uint64{7}),
		BlockHash(seed, toks[32:48], []uint64{9}),
	}
	if !slices.Equal(got, want) {
		t.Errorf("HashPrompt = %x, want %x", got, want)
	}
	if got := HashPrompt(seed, toks, 0, nil, nil); len(got) != 0 {
		t.Errorf("block size 0 hashed %d blocks", len(got))
	}
	// The normalizer and HashPrompt agree on a store with multimodal extra keys.
	n := New(Config{})
	var b Batch
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	payload, err := encodeDesc(fmt.Sprintf(`[1.0, [["BlockStored", [1, 2, 3], nil, [seq(1, 48)], 16, nil, "GPU", nil,
		[[%q, "s"], [%q], [["img-9", 32]]]]]]`, id, id))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Normalize(payload, &b); err != nil || len(b.Events) != 1 {
		t.Fatalf("normalize: %v, %d events", err, len(b.Events))
	}
	prompt := HashPrompt(seed, toks, 16, []MMItem{{MMHash(id), 10, 10}, {MMHash("img-9"), 32, 1}}, nil)
	for i, bl := range b.Events[0].Blocks {
		if bl.BlockHash != prompt[i] {
			t.Errorf("block %d: normalizer %#x, HashPrompt %#x", i, bl.BlockHash, prompt[i])
		}
	}
}

func TestBlockHashAllocs(t *testing.T) {
	toks := seqTokens(1, 16)
	mm := []uint64{1, 2}
	if a := testing.AllocsPerRun(100, func() { BlockHash(1, toks, mm) }); a != 0 {
		t.Errorf("BlockHash allocates %v times", a)
	}
	out := make([]uint64, 0, 8)
	if a := testing.AllocsPerRun(100, func() { HashPrompt(1, toks, 16, nil, out[:0]) }); a != 0 {
		t.Errorf("HashPrompt allocates %v times", a)
	}
}

// TestSeedCache: the cached seed is Seed's, whatever the sequence of LoRA
// names and namespaces.
func TestSeedCache(t *testing.T) {
	c := newSeedCache()
	for _, s := range [][2]string{{"", ""}, {"l", ""}, {"l", ""}, {"", "t"}, {"l", "t"}, {"", ""}} {
		ns := blockNS{}
		if s[1] != "" {
			ns = blockNS{hash: xxhash.Sum64String(s[1]), ok: true}
		}
		if got, want := c.seed([]byte(s[0]), ns), Seed(s[0], s[1]); got != want {
			t.Errorf("seed(%q, %q) = %x, want %x", s[0], s[1], got, want)
		}
	}
}

// Test vectors for gateways in other languages: testdata/hash_vectors.json,
// rewritten with -rewrite. Every 64-bit value is a "0x"-prefixed hex string.
type hashVectors struct {
	Comment     string         `json:"comment"`
	Seeds       []seedVector   `json:"seeds"`
	MMHashes    []mmVector     `json:"mm_hashes"`
	BlockHashes []blockVector  `json:"block_hashes"`
	Prompts     []promptVector `json:"prompts"`
}

type seedVector struct {
	LoRA      string `json:"lora_name"`
	Namespace string `json:"cache_namespace"`
	Seed      string `json:"seed"`
}

type mmVector struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

type blockVector struct {
	Seed   string   `json:"seed"`
	Tokens []uint32 `json:"tokens"`
	MM     []string `json:"mm"`
	Hash   string   `json:"hash"`
}

type promptVector struct {
	LoRA      string         `json:"lora_name"`
	Namespace string         `json:"cache_namespace"`
	BlockSize int            `json:"block_size"`
	Tokens    []uint32       `json:"tokens"`
	MMItems   []promptMMItem `json:"mm_items"`
	Hashes    []string       `json:"hashes"`
}

type promptMMItem struct {
	ID     string `json:"id"`
	Offset uint32 `json:"offset"`
	Length uint32 `json:"length"`
}

func hx(v uint64) string { return fmt.Sprintf("%#016x", v) }

func parseHx(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return v
}

const vectorsPath = "testdata/hash_vectors.json"

func TestHashVectors(t *testing.T) {
	if rewriting() {
		writeHashVectors(t)
	}
	data, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var v hashVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Seeds) == 0 || len(v.MMHashes) == 0 || len(v.BlockHashes) == 0 || len(v.Prompts) == 0 {
		t.Fatal("empty vectors")
	}
	for _, s := range v.Seeds {
		if got := Seed(s.LoRA, s.Namespace); got != parseHx(t, s.Seed) {
			t.Errorf("Seed(%q, %q) = %s, want %s", s.LoRA, s.Namespace, hx(got), s.Seed)
		}
	}
	for _, m := range v.MMHashes {
		if got := MMHash(m.ID); got != parseHx(t, m.Hash) {
			t.Errorf("MMHash(%q) = %s, want %s", m.ID, hx(got), m.Hash)
		}
	}
	for _, bh := range v.BlockHashes {
		var mm []uint64
		for _, m := range bh.MM {
			mm = append(mm, parseHx(t, m))
		}
		if got := BlockHash(parseHx(t, bh.Seed), bh.Tokens, mm); got != parseHx(t, bh.Hash) {
			t.Errorf("BlockHash(%s, %v, %v) = %s, want %s", bh.Seed, bh.Tokens, bh.MM, hx(got), bh.Hash)
		}
	}
	for i, p := range v.Prompts {
		var items []MMItem
		for _, it := range p.MMItems {
			items = append(items, MMItem{Hash: MMHash(it.ID), Offset: it.Offset, Length: it.Length})
		}
		got := HashPrompt(Seed(p.LoRA, p.Namespace), p.Tokens, p.BlockSize, items, nil)
		var want []uint64
		for _, h := range p.Hashes {
			want = append(want, parseHx(t, h))
		}
		if !slices.Equal(got, want) {
			t.Errorf("prompt %d: HashPrompt = %x, want %x", i, got, want)
		}
	}
}

// TestHashVectorsIndependent recomputes the vectors with the C reference
// xxHash library (libxxhash, through Python's ctypes), an implementation
// independent of github.com/cespare/xxhash.
func TestHashVectorsIndependent(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("%s not installed: %v", py, err)
	}
	if err := exec.Command(py, "-c", "import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library('xxhash') else 1)").Run(); err != nil {
		t.Skipf("libxxhash not installed (checked with ctypes.util.find_library): %v", err)
	}
	out, err := exec.Command(py, filepath.Join("testdata", "check_hash_vectors.py"), vectorsPath).CombinedOutput()
	if err != nil {
		t.Fatalf("independent check failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func writeHashVectors(t *testing.T) {
	var v hashVectors
	v.Comment = "kvrouter router block hash test vectors; see the README section Router block hash. 64-bit values are hex strings."
	for _, s := range [][2]string{{"", ""}, {"sql-lora", ""}, {"", "tenant-a"}, {"sql-lora", "tenant-a"}, {"é", "\x00"}} {
		v.Seeds = append(v.Seeds, seedVector{s[0], s[1], hx(Seed(s[0], s[1]))})
	}
	for _, id := range []string{
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"FEDCBA98765432100123456789abcdef0123456789abcdef0123456789abcdef",
		"img-77", "", "0123456789abcdef",
	} {
		v.MMHashes = append(v.MMHashes, mmVector{id, hx(MMHash(id))})
	}
	for _, c := range []struct {
		seed   uint64
		tokens []uint32
		mm     []uint64
	}{
		{Seed("", ""), seqTokens(1, 16), nil},
		{Seed("", ""), seqTokens(151600, 16), nil},
		{Seed("", ""), []uint32{0, 4294967295, 65536, 255, 256, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, nil},
		{Seed("sql-lora", "tenant-a"), seqTokens(1, 16), nil},
		{Seed("", ""), seqTokens(1, 16), []uint64{MMHash("img-77")}},
		{Seed("", "tenant-a"), seqTokens(17, 16), []uint64{0x0123456789abcdef, MMHash("img-77")}},
		{Seed("", ""), seqTokens(1, 64), nil},
	} {
		var mm []string
		for _, h := range c.mm {
			mm = append(mm, hx(h))
		}
		v.BlockHashes = append(v.BlockHashes, blockVector{hx(c.seed), c.tokens, mm, hx(BlockHash(c.seed, c.tokens, c.mm))})
	}
	type item = promptMMItem
	for _, c := range []struct {
		lora, ns string
		bs       int
		tokens   []uint32
		items    []item
	}{
		{"", "", 16, seqTokens(1, 40), nil},
		{"sql-lora", "tenant-a", 16, seqTokens(100, 64), nil},
		{"", "", 16, seqTokens(1, 50), []item{{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 10, 10}, {"img-77", 32, 1}, {"empty", 5, 0}}},
		{"", "", 32, seqTokens(1, 64), []item{{"img-77", 31, 2}}},
	} {
		var items []MMItem
		for _, it := range c.items {
			items = append(items, MMItem{Hash: MMHash(it.ID), Offset: it.Offset, Length: it.Length})
		}
		var hs []string
		for _, h := range HashPrompt(Seed(c.lora, c.ns), c.tokens, c.bs, items, nil) {
			hs = append(hs, hx(h))
		}
		v.Prompts = append(v.Prompts, promptVector{c.lora, c.ns, c.bs, c.tokens, c.items, hs})
	}
	data, err := json.MarshalIndent(&v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vectorsPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hashPromptScan is HashPrompt as it was before PromptHasher: every item
// looked at for every block. The reference the cursor pass must equal.
func hashPromptScan(seed uint64, tokens []uint32, blockSize int, mm []MMItem, out []uint64) []uint64 {
	if blockSize < 1 {
		return out
	}
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		var hs []uint64
		end := uint64(start + blockSize)
		for _, it := range mm {
			if it.Length != 0 && uint64(it.Offset) < end && uint64(it.Offset)+uint64(it.Length) > uint64(start) {
				hs = append(hs, it.Hash)
			}
		}
		out = append(out, BlockHash(seed, tokens[start:end], hs))
	}
	return out
}

// TestPromptHasherMatchesScan: the cursor pass gives the hashes of scanning
// every item for every block, for items in and out of order, overlapping,
// empty, past the hashed blocks or past uint32's range, with one hasher
// reused across prompts.
func TestPromptHasherMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 1))
	var h PromptHasher
	for iter := range 3000 {
		blockSize := 1 + rng.IntN(20)
		toks := seqTokens(rng.IntN(1000), rng.IntN(12*blockSize))
		items := make([]MMItem, rng.IntN(12))
		span := len(toks) + 8
		for i := range items {
			items[i] = MMItem{Hash: rng.Uint64(), Offset: uint32(rng.IntN(span)), Length: uint32(rng.IntN(3 * blockSize))}
			switch rng.IntN(10) {
			case 0:
				items[i].Length = 0
			case 1:
				items[i].Offset, items[i].Length = math.MaxUint32-1, math.MaxUint32
			case 2:
				items[i].Length = math.MaxUint32
			}
		}
		if rng.IntN(2) == 0 { // as clients list them
			slices.SortStableFunc(items, func(a, b MMItem) int { return cmp.Compare(a.Offset, b.Offset) })
		}
		seed := rng.Uint64()
		want := hashPromptScan(seed, toks, blockSize, items, []uint64{1})
		if got := h.Hash(seed, toks, blockSize, items, []uint64{1}); !slices.Equal(got, want) {
			t.Fatalf("iter %d: block size %d, %d tokens, items %+v:\ncursor %x\nscan   %x", iter, blockSize, len(toks), items, got, want)
		}
		if got := HashPrompt(seed, toks, blockSize, items, []uint64{1}); !slices.Equal(got, want) {
			t.Fatalf("iter %d: HashPrompt differs from the scan", iter)
		}
	}
}

// TestPromptHasherWork: hashing N items over B blocks visits items O(N + B)
// times (counted, not timed), where the scan visited N*B.
func TestPromptHasherWork(t *testing.T) {
	for _, c := range []struct {
		nTokens, items, itemLen int
		shuffle                 bool
	}{
		{262144, 40000, 4, false},   // the attack: 16,384 blocks
		{262144, 40000, 4, true},    // the same, listed in random order
		{262144, 1024, 200, false},  // items spanning several blocks
		{262144, 16384, 16, false},  // one item per block, aligned
		{1 << 20, 100000, 1, false}, // 4 million tokens, 100,000 one-token items
		{4096, 40000, 0, false},     // more items than tokens: empty ones
	} {
		items := spreadItems(c.items, c.nTokens, c.itemLen)
		if c.itemLen == 0 {
			for i := range items {
				items[i].Length = 0
			}
		}
		if c.shuffle {
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		}
		toks := make([]uint32, c.nTokens)
		var h PromptHasher
		out := h.Hash(1, toks, 16, items, nil)
		n, b := len(items), len(out)
		bound := b + 4*n
		if c.shuffle {
			bound = b + 4*n + 2*16*n // plus shifts past at most two blocks' items
		}
		if h.visits > bound {
			t.Errorf("%d items over %d blocks (shuffled %v): %d item visits, over %d", n, b, c.shuffle, h.visits, bound)
		}
		t.Logf("%d items over %d blocks (shuffled %v): %d item visits (bound %d; a scan of every item per block: %d)", n, b, c.shuffle, h.visits, bound, n*b)
	}
}
