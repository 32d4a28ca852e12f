// Package tokentest gives tests the real tokenizer files committed
// (gzipped) in the tokenizer package's testdata, as bytes or laid out as a
// user's model directory.
package tokentest

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Models are the committed models.
var Models = []string{"qwen3", "llama3"}

// testdata is the tokenizer package's testdata directory, found from this
// file's own path so that any package's test can use it.
func testdata(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("tokentest: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Read returns model's committed file name (e.g. "tokenizer.json"),
// ungzipped.
func Read(t testing.TB, model, name string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata(t), model, name+".gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Dir writes model's tokenizer.json and tokenizer_config.json into a
// temporary directory, as --model NAME=DIR wants it, and returns it.
func Dir(t testing.TB, model string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), Read(t, model, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
