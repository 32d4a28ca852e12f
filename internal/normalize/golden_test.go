package normalize

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expect sections of testdata/cases/*.txt")

// Golden cases: testdata/cases/*.txt. A case is a header of directives, then
// sections separated by lines "== NAME":
//
//	config block_size=16              the Normalizer's Config (once, in the header)
//	hash NAME lora=L ns=N tokens=A..B[,C..D] [mm=ID,ID]
//	                                  names a router block hash for the output
//	== payload                        a msgpack description (see msgdesc_test.go)
//	== hex                            a payload as hex bytes
//	== reset                          calls Normalizer.Reset
//	== expect                         the expected output for the previous payload
//
// Every payload is normalized by the same Normalizer, in order.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/cases/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runCase(t, f) })
	}
}

type section struct {
	name string
	body string
}

func parseCase(text string) (header string, secs []section) {
	lines := strings.SplitAfter(text, "\n")
	cur := -1
	var hb strings.Builder
	for _, ln := range lines {
		if strings.HasPrefix(ln, "== ") {
			secs = append(secs, section{name: strings.TrimSpace(ln[3:])})
			cur = len(secs) - 1
			continue
		}
		if cur < 0 {
			hb.WriteString(ln)
		} else {
			secs[cur].body += ln
		}
	}
	return hb.String(), secs
}

func runCase(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, secs := parseCase(string(data))
	cfg := Config{}
	names := map[uint64]string{}
	for _, ln := range strings.Split(header, "\n") {
		f := strings.Fields(ln)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "config":
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "block_size":
					cfg.BlockSize, _ = strconv.Atoi(v)
				case "max_namespaced_blocks":
					cfg.MaxNamespacedBlocks, _ = strconv.Atoi(v)
				default:
					t.Fatalf("unknown config %q", k)
				}
			}
		case "hash":
			h, err := namedHash(f[2:])
			if err != nil {
				t.Fatalf("%s: %v", ln, err)
			}
			if old, dup := names[h]; dup {
				t.Fatalf("hash %s equals hash %s", f[1], old)
			}
			names[h] = f[1]
		default:
			t.Fatalf("unknown directive %q", ln)
		}
	}
	n := New(cfg)
	var b Batch
	var out bytes.Buffer
	changed := false
	for i := range secs {
		s := &secs[i]
		switch s.name {
		case "payload", "hex":
			var payload []byte
			var err error
			if s.name == "hex" {
				var hx strings.Builder
				for _, ln := range strings.Split(s.body, "\n") {
					if !strings.HasPrefix(strings.TrimSpace(ln), "#") {
						hx.WriteString(strings.Join(strings.Fields(ln), ""))
					}
				}
				payload, err = hex.DecodeString(hx.String())
			} else {
				payload, err = encodeDesc(s.body)
			}
			if err != nil {
				t.Fatalf("section %d: %v", i, err)
			}
			got := render(n, payload, &b, names)
			if i+1 >= len(secs) || secs[i+1].name != "expect" {
				t.Fatalf("section %d: payload without expect", i)
			}
			exp := &secs[i+1]
			if strings.TrimSpace(exp.body) != strings.TrimSpace(got) {
				if *update {
					exp.body = got
					changed = true
				} else {
					t.Errorf("section %d (%s): got\n%s\nwant\n%s", i, s.name, got, exp.body)
				}
			}
		case "reset":
			n.Reset()
		case "expect":
		default:
			t.Fatalf("unknown section %q", s.name)
		}
	}
	if changed {
		out.WriteString(header)
		for _, s := range secs {
			fmt.Fprintf(&out, "== %s\n%s", s.name, s.body)
			if !strings.HasSuffix(s.body, "\n") {
				out.WriteString("\n")
			}
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// namedHash computes a hash directive's BlockHash.
func namedHash(args []string) (uint64, error) {
	var lora, ns string
	var tokens []uint32
	var mm []uint64
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "lora":
			lora = unq(v)
		case "ns":
			ns = unq(v)
		case "tokens":
			for _, r := range strings.Split(v, ",") {
				lo, hi, ok := strings.Cut(r, "..")
				a, err := strconv.ParseUint(lo, 10, 32)
				if err != nil {
					return 0, err
				}
				b := a
				if ok {
					if b, err = strconv.ParseUint(hi, 10, 32); err != nil {
						return 0, err
					}
				}
				for x := a; x <= b; x++ {
					tokens = append(tokens, uint32(x))
				}
			}
		case "mm":
			for _, id := range strings.Split(v, ",") {
				mm = append(mm, MMHash(unq(id)))
			}
		default:
			return 0, fmt.Errorf("unknown hash argument %q", k)
		}
	}
	return BlockHash(Seed(lora, ns), tokens, mm), nil
}

func unq(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

var tierNames = [...]string{"device", "host", "disk", "external"}

// render normalizes one payload and prints the result readably.
func render(n *Normalizer, payload []byte, b *Batch, names map[uint64]string) string {
	var sb strings.Builder
	err := n.Normalize(payload, b)
	if err != nil {
		fmt.Fprintf(&sb, "error: %v\n", err)
		if len(b.Events) != 0 || len(b.Errors) != 0 {
			fmt.Fprintf(&sb, "BUG: batch not empty after error\n")
		}
		return sb.String()
	}
	// Names for split sub-block hashes of every engine hash in the payload.
	syn := map[uint64]string{}
	var rb RawBatch
	if DecodeBatch(payload, &rb) == nil {
		for _, ev := range rb.Events {
			for _, h := range ev.BlockHashes {
				for i := 0; i < 8; i++ {
					syn[splitHash(h, i)] = fmt.Sprintf("split(%d,%d)", h, i)
				}
			}
		}
	}
	eng := func(h uint64) string {
		if s, ok := syn[h]; ok {
			return s
		}
		return strconv.FormatUint(h, 10)
	}
	fmt.Fprintf(&sb, "batch ts=%s dp_rank=%d\n", strconv.FormatFloat(b.TS, 'f', -1, 64), b.DPRank)
	for _, ev := range b.Events {
		switch ev.Kind {
		case KindStore:
			parent := "-"
			if ev.HasParent {
				parent = eng(ev.Parent)
			}
			fmt.Fprintf(&sb, "store tier=%s parent=%s\n", tierNames[ev.Tier], parent)
			for _, bl := range ev.Blocks {
				name, ok := names[bl.BlockHash]
				if !ok {
					name = fmt.Sprintf("%#016x", bl.BlockHash)
				}
				fmt.Fprintf(&sb, "  block %s %s\n", eng(bl.EngineHash), name)
			}
		case KindStoreTier, KindRemove:
			kind := "store_tier"
			if ev.Kind == KindRemove {
				kind = "remove"
			}
			var hs []string
			for _, h := range ev.EngineHashes {
				hs = append(hs, eng(h))
			}
			fmt.Fprintf(&sb, "%s tier=%s hashes=[%s]\n", kind, tierNames[ev.Tier], strings.Join(hs, " "))
		case KindClear:
			sb.WriteString("clear\n")
		default:
			fmt.Fprintf(&sb, "BUG: kind %d\n", ev.Kind)
		}
	}
	var sk []string
	for r, c := range b.Skipped {
		if c > 0 {
			sk = append(sk, fmt.Sprintf("%s=%d", Reason(r), c))
		}
	}
	sort.Strings(sk)
	if len(sk) > 0 {
		fmt.Fprintf(&sb, "skipped %s\n", strings.Join(sk, " "))
	}
	for _, e := range b.Errors {
		fmt.Fprintf(&sb, "event error: %v\n", e)
	}
	fmt.Fprintf(&sb, "counts stored=%d removed=%d cleared=%d unknown=%d engine_blocks=%d blocks=%d namespaced=%d",
		b.Tags[TagStored], b.Tags[TagRemoved], b.Tags[TagCleared], b.Tags[TagUnknown],
		b.EngineBlocks, b.Blocks, n.NamespacedBlocks())
	if b.NamespaceOverflow > 0 {
		fmt.Fprintf(&sb, " namespace_overflow=%d", b.NamespaceOverflow)
	}
	sb.WriteString("\n")
	return sb.String()
}
