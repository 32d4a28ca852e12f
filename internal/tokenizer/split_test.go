package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestSplit runs testdata/split: each case splits its input (a Go-quoted string) with a family's
// pre-tokenizer and prints the pre-tokens, quoted, separated by |.
func TestSplit(t *testing.T) {
	datadriven.RunTest(t, "testdata/split", func(t *testing.T, d *datadriven.TestData) string {
		var s splitter
		switch d.Cmd {
		case "gpt2":
			s = gpt2Splitter{}
		case "llama3":
			s = cl100kSplitter{maxDigits: 3}
		case "qwen2":
			s = cl100kSplitter{maxDigits: 1}
		default:
			d.Fatalf(t, "unknown family %q", d.Cmd)
		}
		in, err := strconv.Unquote(strings.TrimSpace(d.Input))
		if err != nil {
			d.Fatalf(t, "input must be a Go-quoted string: %v", err)
		}
		var out []string
		for len(in) > 0 {
			n := s.next(in)
			out = append(out, fmt.Sprintf("%q", in[:n]))
			in = in[n:]
		}
		return strings.Join(out, "|") + "\n"
	})
}
