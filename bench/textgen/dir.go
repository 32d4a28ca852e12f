package textgen

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrNoTokenizer is returned when a tokenizer argument names no usable directory.
var ErrNoTokenizer = errors.New("no tokenizer.json or tokenizer.json.gz")

// Builtin names the tokenizers committed (gzipped) in the repository, resolved from the module root.
var Builtin = map[string]string{
	"qwen3":  "internal/tokenizer/testdata/qwen3",
	"llama3": "internal/tokenizer/testdata/llama3",
}

// maxFile bounds an ungzipped tokenizer file.
const maxFile = 64 << 20

// Dir resolves arg (a builtin name or a directory) to a directory holding plain tokenizer.json
// (and tokenizer_config.json when the source has it), as the router's --model flag wants it.
// Gzipped files are written ungzipped to a temporary directory that cleanup removes.
func Dir(arg string) (dir string, cleanup func(), err error) {
	src := arg
	if rel, ok := Builtin[arg]; ok {
		root, err := moduleRoot()
		if err != nil {
			return "", nil, fmt.Errorf("tokenizer %s: %w", arg, err)
		}
		src = filepath.Join(root, rel)
	}
	if _, err := os.Stat(filepath.Join(src, "tokenizer.json")); err == nil {
		return src, func() {}, nil
	}
	if _, err := os.Stat(filepath.Join(src, "tokenizer.json.gz")); err != nil {
		return "", nil, fmt.Errorf("tokenizer %s: %w in %s", arg, ErrNoTokenizer, src)
	}
	tmp, err := os.MkdirTemp("", "kvbench-tokenizer-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := gunzip(filepath.Join(src, name+".gz"), filepath.Join(tmp, name)); err != nil {
			if name != "tokenizer.json" && errors.Is(err, os.ErrNotExist) {
				continue
			}
			cleanup()
			return "", nil, fmt.Errorf("tokenizer %s: %w", arg, err)
		}
	}
	return tmp, cleanup, nil
}

func gunzip(from, to string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, maxFile+1))
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	if len(b) > maxFile {
		return fmt.Errorf("%s: over %d bytes ungzipped", from, maxFile)
	}
	return os.WriteFile(to, b, 0o644)
}

// moduleRoot is the nearest directory at or above the working directory holding go.mod.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.mod at or above the working directory (run from the repository)")
		}
		d = up
	}
}
