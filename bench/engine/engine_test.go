package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/shamaton/msgpack/v2"
)

func TestCacheLRU(t *testing.T) {
	type op struct {
		do      string // insert, touch, remove
		key     uint64
		victim  uint64 // for insert: expected evicted key, 0 for none
		present bool   // for touch/remove: expected result
	}
	tests := []struct {
		name string
		cap  int
		ops  []op
		want []uint64 // keys held afterwards, most recent first
	}{
		{"fill", 3, []op{{do: "insert", key: 1}, {do: "insert", key: 2}, {do: "insert", key: 3}}, []uint64{3, 2, 1}},
		{"evict oldest", 2, []op{{do: "insert", key: 1}, {do: "insert", key: 2}, {do: "insert", key: 3, victim: 1}}, []uint64{3, 2}},
		{"touch protects", 2, []op{{do: "insert", key: 1}, {do: "insert", key: 2}, {do: "touch", key: 1, present: true}, {do: "insert", key: 3, victim: 2}}, []uint64{3, 1}},
		{"touch missing", 2, []op{{do: "insert", key: 1}, {do: "touch", key: 9, present: false}}, []uint64{1}},
		{"reinsert is touch", 2, []op{{do: "insert", key: 1}, {do: "insert", key: 2}, {do: "insert", key: 1}, {do: "insert", key: 3, victim: 2}}, []uint64{3, 1}},
		{"remove frees slot", 2, []op{{do: "insert", key: 1}, {do: "insert", key: 2}, {do: "remove", key: 1, present: true}, {do: "insert", key: 3}, {do: "remove", key: 1, present: false}}, []uint64{3, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(tt.cap)
			for i, o := range tt.ops {
				switch o.do {
				case "insert":
					v, ok := c.Insert(o.key)
					if ok != (o.victim != 0) || v != o.victim {
						t.Fatalf("op %d insert %d: victim %d,%v want %d", i, o.key, v, ok, o.victim)
					}
				case "touch":
					if got := c.Touch(o.key); got != o.present {
						t.Fatalf("op %d touch %d = %v", i, o.key, got)
					}
				case "remove":
					if got := c.Remove(o.key); got != o.present {
						t.Fatalf("op %d remove %d = %v", i, o.key, got)
					}
				}
				if err := c.check(); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			var got []uint64
			for i := c.nodes[0].next; i != 0; i = c.nodes[i].next {
				got = append(got, c.nodes[i].key)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("held %v, want %v", got, tt.want)
			}
		})
	}
}

func seqTokens(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i)
	}
	return t
}

func newTestEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestChainHashes(t *testing.T) {
	a := ChainHashes(1, 4, seqTokens(0, 10), nil)
	if len(a) != 2 {
		t.Fatalf("got %d hashes for 10 tokens at block size 4, want 2", len(a))
	}
	b := ChainHashes(1, 4, append(seqTokens(0, 4), 99, 99, 99, 99), nil)
	if a[0] != b[0] || a[1] == b[1] {
		t.Fatalf("shared first block must hash equal, different second must not: %v %v", a, b)
	}
	// The same second block after a different first block hashes differently (chaining).
	c := ChainHashes(1, 4, append([]uint32{7, 7, 7, 7}, seqTokens(4, 4)...), nil)
	if c[1] == a[1] {
		t.Fatal("block hash ignores its parent")
	}
	if d := ChainHashes(2, 4, seqTokens(0, 8), nil); d[0] == a[0] {
		t.Fatal("seed ignored")
	}
}

func TestServePrefixAndEviction(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 4, PrefillPerToken: time.Millisecond, DecodePerToken: 10 * time.Millisecond})
	// Request A: 3 full blocks + 2 tokens.
	a := seqTokens(0, 14)
	r := e.Serve(Request{Tokens: a, OutputTokens: 5})
	if r.PromptBlocks != 3 || r.CachedBlocks != 0 || r.StoredBlocks != 3 || r.UncachedTokens != 14 {
		t.Fatalf("first serve: %+v", r)
	}
	if len(r.Events) != 1 || r.Events[0].Kind != Stored || r.Events[0].HasParent || len(r.Events[0].Tokens) != 12 {
		t.Fatalf("first serve events: %+v", r.Events)
	}
	hA := e.BlockHashes(a, nil)
	// Request B shares A's first two blocks.
	b := append(seqTokens(0, 8), seqTokens(100, 8)...)
	r = e.Serve(Request{Tokens: b})
	if r.CachedBlocks != 2 || r.StoredBlocks != 2 || r.EvictedBlocks != 1 || r.UncachedTokens != 8 {
		t.Fatalf("second serve: %+v", r)
	}
	// Cache holds 4: the LRU victim is A's last block (tails go first).
	if len(r.Events) != 2 || r.Events[0].Kind != Removed || !reflect.DeepEqual(r.Events[0].Hashes, []uint64{hA[2]}) {
		t.Fatalf("second serve remove: %+v", r.Events)
	}
	st := r.Events[1]
	if st.Kind != Stored || !st.HasParent || st.Parent != hA[1] || len(st.Hashes) != 2 || !reflect.DeepEqual(st.Tokens, b[8:16]) {
		t.Fatalf("second serve store: %+v", st)
	}
	// A again: its first two blocks hit, the third was evicted.
	r = e.Serve(Request{Tokens: a})
	if r.CachedBlocks != 2 {
		t.Fatalf("third serve cached %d, want 2", r.CachedBlocks)
	}
	if err := e.cache.check(); err != nil {
		t.Fatal(err)
	}
	s := e.Stats()
	if s.Requests != 3 || s.PromptBlocks != 10 || s.CachedBlocks != 4 || s.CachedNow != 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestServeLongerThanCache(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 2})
	r := e.Serve(Request{Tokens: seqTokens(0, 20)})
	if r.PromptBlocks != 5 || r.StoredBlocks != 2 || r.EvictedBlocks != 0 {
		t.Fatalf("%+v", r)
	}
	r = e.Serve(Request{Tokens: seqTokens(0, 20)})
	if r.CachedBlocks != 2 || r.StoredBlocks != 0 || len(r.Events) != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestServeTiming(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 100, PrefillPerToken: time.Millisecond, PrefillBase: 5 * time.Millisecond, DecodePerToken: 10 * time.Millisecond})
	r1 := e.Serve(Request{Tokens: seqTokens(0, 102), OutputTokens: 3, Arrival: 0})
	if r1.Start != 0 || r1.PrefillDone != 107*time.Millisecond || r1.Finish != 137*time.Millisecond {
		t.Fatalf("r1 %+v", r1)
	}
	// Arrives while the first prefill runs: waits for it. 100 tokens are cached.
	r2 := e.Serve(Request{Tokens: seqTokens(0, 102), OutputTokens: 0, Arrival: 50 * time.Millisecond})
	if r2.Start != 107*time.Millisecond || r2.PrefillDone != 114*time.Millisecond || r2.TTFT(50*time.Millisecond) != 64*time.Millisecond {
		t.Fatalf("r2 %+v", r2)
	}
	// Arrives after the engine went idle.
	r3 := e.Serve(Request{Tokens: seqTokens(500, 4), Arrival: time.Second})
	if r3.Start != time.Second {
		t.Fatalf("r3 %+v", r3)
	}
}

// subscriber dials ep with a SUB socket and waits until the publisher sees it.
func subscriber(t *testing.T, e *Engine) zmq4.Socket {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close(); cancel() })
	if err := sub.Dial(e.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !e.Publisher().Subscribed() {
		if time.Now().After(deadline) {
			t.Fatal("subscription never reached the publisher")
		}
		time.Sleep(time.Millisecond) // polling, bounded by the deadline
	}
	return sub
}

func recvWithin(t *testing.T, s zmq4.Socket) zmq4.Msg {
	t.Helper()
	ch := make(chan zmq4.Msg, 1)
	errc := make(chan error, 1)
	go func() {
		m, err := s.Recv()
		if err != nil {
			errc <- err
			return
		}
		ch <- m
	}()
	select {
	case m := <-ch:
		return m
	case err := <-errc:
		t.Fatalf("recv: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("recv timed out")
	}
	return zmq4.Msg{}
}

func asUint(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	}
	t.Fatalf("not an integer: %T %v", v, v)
	return 0
}

func asUints(t *testing.T, v any) []uint64 {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("not a list: %T", v)
	}
	out := make([]uint64, len(l))
	for i, x := range l {
		out[i] = asUint(t, x)
	}
	return out
}

func TestPublishFormats(t *testing.T) {
	for _, f := range []Format{FormatVLLMMap, FormatVLLMArray, FormatSGLang} {
		t.Run(f.String(), func(t *testing.T) {
			// A seed that makes some hashes exceed 2^63, to exercise signed encoding.
			e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 2, Topic: "kv", DPRank: 3, Format: f, HashSeed: 42})
			sub := subscriber(t, e)
			toks := seqTokens(0, 8)
			r, err := e.ServeAndPublish(Request{Tokens: toks})
			if err != nil {
				t.Fatal(err)
			}
			r2, err := e.ServeAndPublish(Request{Tokens: append(seqTokens(0, 4), seqTokens(50, 4)...)})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Reset(); err != nil {
				t.Fatal(err)
			}
			for seq := uint64(0); seq < 3; seq++ {
				m := recvWithin(t, sub)
				if len(m.Frames) != 3 || string(m.Frames[0]) != "kv" || binary.BigEndian.Uint64(m.Frames[1]) != seq {
					t.Fatalf("frames %q", m.Frames)
				}
				var batch any
				if err := msgpack.Unmarshal(m.Frames[2], &batch); err != nil {
					t.Fatal(err)
				}
				var events []any
				var rank uint64
				switch f {
				case FormatSGLang:
					mb := batch.(map[any]any)
					events, rank = mb["events"].([]any), asUint(t, mb["attn_dp_rank"])
				default:
					ab := batch.([]any)
					if len(ab) != 3 {
						t.Fatalf("batch len %d", len(ab))
					}
					events, rank = ab[1].([]any), asUint(t, ab[2])
				}
				if rank != 3 {
					t.Fatalf("rank %d", rank)
				}
				got := decodeEvents(t, f, events)
				var want []Event
				switch seq {
				case 0:
					want = r.Events
				case 1:
					want = r2.Events
				case 2:
					want = []Event{{Kind: Cleared}}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seq %d: decoded %+v\nwant %+v", seq, got, want)
				}
			}
		})
	}
}

// decodeEvents turns decoded msgpack events back into Events.
func decodeEvents(t *testing.T, f Format, events []any) []Event {
	t.Helper()
	var out []Event
	for _, raw := range events {
		var tag string
		fields := map[string]any{}
		switch x := raw.(type) {
		case map[any]any:
			if f != FormatVLLMMap {
				t.Fatalf("map event in %v", f)
			}
			for k, v := range x {
				fields[k.(string)] = v
			}
			tag = fields["type"].(string)
		case []any:
			if f == FormatVLLMMap {
				t.Fatalf("array event in %v", f)
			}
			tag = x[0].(string)
			names := map[string][]string{
				"BlockStored":  {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
				"BlockRemoved": {"block_hashes", "medium"},
			}[tag]
			for i, n := range names {
				fields[n] = x[i+1]
			}
		default:
			t.Fatalf("event %T", raw)
		}
		ev := Event{}
		switch tag {
		case "BlockStored":
			ev.Kind = Stored
			ev.Hashes = asUints(t, fields["block_hashes"])
			if p := fields["parent_block_hash"]; p != nil {
				ev.HasParent, ev.Parent = true, asUint(t, p)
			}
			for _, tok := range asUints(t, fields["token_ids"]) {
				ev.Tokens = append(ev.Tokens, uint32(tok))
			}
			ev.BlockSize = int(asUint(t, fields["block_size"]))
			if fields["medium"] != "GPU" {
				t.Fatalf("medium %v", fields["medium"])
			}
		case "BlockRemoved":
			ev.Kind = Removed
			ev.Hashes = asUints(t, fields["block_hashes"])
		case "AllBlocksCleared":
			ev.Kind = Cleared
		default:
			t.Fatalf("tag %q", tag)
		}
		out = append(out, ev)
	}
	return out
}

func TestReplay(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 8, Topic: "t", ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBuffer: 3})
	for i := 0; i < 5; i++ { // seqs 0..4; the buffer keeps 2..4
		if _, err := e.ServeAndPublish(Request{Tokens: seqTokens(100*i, 4)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(e.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		start uint64
		want  []uint64
	}{{3, []uint64{3, 4}}, {0, []uint64{2, 3, 4}}, {9, nil}} {
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], tc.start)
		if err := dealer.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for {
			m := recvWithin(t, dealer)
			if len(m.Frames) != 4 || len(m.Frames[0]) != 0 || string(m.Frames[1]) != "t" || len(m.Frames[2]) != 8 {
				t.Fatalf("reply frames %q", m.Frames)
			}
			if string(m.Frames[2]) == string(endSeq) {
				if len(m.Frames[3]) != 0 {
					t.Fatal("end marker with payload")
				}
				break
			}
			seq := binary.BigEndian.Uint64(m.Frames[2])
			var batch []any
			if err := msgpack.Unmarshal(m.Frames[3], &batch); err != nil {
				t.Fatalf("seq %d payload: %v", seq, err)
			}
			got = append(got, seq)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("replay from %d: got %v want %v", tc.start, got, tc.want)
		}
	}
	// A malformed request is counted and skipped; the socket keeps serving.
	if err := dealer.SendMulti(zmq4.NewMsgFrom(nil, []byte{1, 2})); err != nil {
		t.Fatal(err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], 4)
	if err := dealer.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		t.Fatal(err)
	}
	if m := recvWithin(t, dealer); binary.BigEndian.Uint64(m.Frames[2]) != 4 {
		t.Fatalf("after malformed: %q", m.Frames)
	}
	recvWithin(t, dealer) // end marker
	if served, bad := e.Publisher().ReplayStats(); served != 4 || bad != 1 {
		t.Fatalf("replay stats served=%d malformed=%d", served, bad)
	}
}

func fmtStruct(v any) string { return fmt.Sprint(v) }

func TestRestart(t *testing.T) {
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 8, Topic: "t", ReplayEndpoint: "tcp://127.0.0.1:0"})
	for i := 0; i < 3; i++ {
		if _, err := e.ServeAndPublish(Request{Tokens: seqTokens(100*i, 8)}); err != nil {
			t.Fatal(err)
		}
	}
	ep, rep := e.Endpoint(), e.ReplayEndpoint()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	if e.Endpoint() != ep || e.ReplayEndpoint() != rep || e.Publisher().Seq() != 0 || e.Stats().CachedNow != 0 {
		t.Fatalf("after restart: %s %s seq %d cached %d", e.Endpoint(), e.ReplayEndpoint(), e.Publisher().Seq(), e.Stats().CachedNow)
	}
	// A subscriber of the same address gets the new process's stream from seq 0,
	// and a prompt cached before the restart is stored again.
	sub := subscriber(t, e)
	res, err := e.ServeAndPublish(Request{Tokens: seqTokens(0, 8)})
	if err != nil || res.CachedBlocks != 0 || res.StoredBlocks != 2 {
		t.Fatalf("serve after restart: %+v %v", res, err)
	}
	if m := recvWithin(t, sub); binary.BigEndian.Uint64(m.Frames[1]) != 0 {
		t.Fatalf("first seq after restart %x", m.Frames[1])
	}
	// Replay serves only the new stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(rep); err != nil {
		t.Fatal(err)
	}
	if err := dealer.SendMulti(zmq4.NewMsgFrom(nil, make([]byte, 8))); err != nil {
		t.Fatal(err)
	}
	if m := recvWithin(t, dealer); binary.BigEndian.Uint64(m.Frames[2]) != 0 {
		t.Fatalf("replayed seq %x", m.Frames[2])
	}
	if m := recvWithin(t, dealer); string(m.Frames[2]) != string(endSeq) {
		t.Fatalf("want the end marker after one batch, got seq %x", m.Frames[2])
	}
}
