package tokentest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDir: every committed model's directory holds its tokenizer.json and
// tokenizer_config.json as Read returns them, and they are JSON objects.
func TestDir(t *testing.T) {
	for _, m := range Models {
		dir := Dir(t, m)
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) || !bytes.Equal(b, Read(t, m, name)) {
				t.Fatalf("%s/%s: %d bytes, not the committed JSON", m, name, len(b))
			}
		}
	}
}
