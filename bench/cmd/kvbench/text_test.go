package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// genTextTrace runs kvbench gen --text-tokenizer qwen3 for a short chat trace and checks that
// every line's text encodes, with the real tokenizer, to exactly the line's blocks' tokens.
func genTextTrace(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chat.jsonl")
	if err := runGen([]string{"--shape", "chat", "--rate", "4", "--duration", "30s", "--block-tokens", "64",
		"--chat-system-len", "const:256", "--chat-user-len", "const:100", "--warmup", "30s", "--summary=false",
		"--text-tokenizer", "qwen3", "--out", path}); err != nil {
		t.Fatal(err)
	}
	reqs, err := trace.LoadBlocks(path, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	lex, _, cleanup, err := loadLexicon("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	var texts []string
	for sc.Scan() {
		var l struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, l.Text)
	}
	if len(texts) != len(reqs) || len(reqs) < 20 {
		t.Fatalf("%d texts for %d requests", len(texts), len(reqs))
	}
	for i, r := range reqs { // (Mooncake lines of equal timestamp keep their order)
		ids, err := lex.Tokenizer().Encode(texts[i], false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, lex.Tokens(r, nil)) {
			t.Fatalf("line %d: text encodes to %d tokens that are not the blocks' %d", i+1, len(ids), r.InputLength)
		}
	}
	return path
}

// TestCompareText replays one generated trace with token ids and as text (Route with
// Prompt.text, engines tokenizing themselves). Round-robin's hit rate does not depend on the
// router, so equal rates show the engines' own tokenization keeps every block of the trace;
// kvrouter's matched blocks in text mode show the router's tokenization agrees with the engines'
// (a tokenizer that differed in any token would match nothing), and the router's drift check
// confirms every request (the engines are large enough never to evict, so a mismatch could only
// be tokens that differ). The chat form (an OpenAI chat
// body, rendered by the router and by the engines with Qwen3's template) must route too.
func TestCompareText(t *testing.T) {
	if testing.Short() {
		t.Skip("starts routers and engines for about 20 s")
	}
	path := genTextTrace(t)
	bin := buildRouter(t)
	results := map[string][]replay.PolicyResult{}
	for _, mode := range []string{"ids", "text", "chat"} {
		args := []string{"--trace", path, "--trace-block-tokens", "64", "--router-bin", bin,
			"--policies", "kvrouter,round-robin", "--engines", "3", "--capacity", "20000", "--speed-up", "15"}
		if mode != "ids" {
			args = append(args, "--text-tokenizer", "qwen3", "--text-form", mode)
		}
		run, err := parseCompare(args)
		if err != nil {
			t.Fatal(err)
		}
		if run.cleanup != nil {
			defer run.cleanup()
		}
		var progress bytes.Buffer
		run.cfg.Progress, run.cfg.OutDir = &progress, t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
		rep, err := replay.Compare(ctx, run.cfg)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, progress.String())
		}
		var table bytes.Buffer
		rep.WriteTable(&table)
		t.Logf("%s:\n%s", mode, table.String())
		results[mode] = rep.Results
	}
	ids, text := results["ids"], results["text"]
	for i := range ids {
		if ids[i].PromptBlocks != text[i].PromptBlocks {
			t.Errorf("%s: %d prompt blocks as text, %d as ids", ids[i].Policy, text[i].PromptBlocks, ids[i].PromptBlocks)
		}
	}
	if ids[1].CachedBlocks != text[1].CachedBlocks {
		t.Errorf("round-robin: %d cached blocks as text, %d as ids", text[1].CachedBlocks, ids[1].CachedBlocks)
	}
	for _, mode := range []string{"text", "chat"} {
		r := results[mode]
		if r[0].CachedBlocks == 0 || r[0].RouterHitRate == 0 {
			t.Errorf("kvrouter %s: %d cached blocks, router hit rate %v: the router's tokenization matched nothing",
				mode, r[0].CachedBlocks, r[0].RouterHitRate)
		}
		if tc := r[0].Tokenization; tc == nil || tc.Error != "" || tc.Confirmed == 0 || tc.Mismatched != 0 {
			t.Errorf("kvrouter %s: the router's drift check %+v: want confirmed requests and no mismatch", mode, tc)
		} else {
			t.Logf("kvrouter %s: drift check %+v", mode, *tc)
		}
		for i := range r {
			if r[i].ChooseErrors != 0 || r[i].Dropped != 0 || r[i].MarkErrors != 0 {
				t.Errorf("%s %s: %d choose errors, %d dropped, %d mark errors: %s", r[i].Policy, mode,
					r[i].ChooseErrors, r[i].Dropped, r[i].MarkErrors, r[i].FirstError)
			}
		}
	}
}
