package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/gateway"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// held serves a job once the test releases it, reporting its rank.
type held struct {
	got     chan int
	release chan struct{}
}

func (h *held) Serve(ctx context.Context, j *engine.Job, first func()) error {
	h.got <- j.Rank
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	first()
	return nil
}

// consecutivePorts listens on two consecutive loopback ports, as a
// dp_size 2 worker's ranks do.
func consecutivePorts(t *testing.T) [2]net.Listener {
	for try := 0; try < 50; try++ {
		l0, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l0.Addr().(*net.TCPAddr).Port
		if l1, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1)); err == nil {
			return [2]net.Listener{l0, l1}
		}
		l0.Close()
	}
	t.Fatal("no two consecutive free ports")
	return [2]net.Listener{}
}

// TestDataParallelRanks: a dp_size 2 worker registered under rank 0's
// port; the picker sends a request for rank 1's cached prompt to port + 1
// and one for rank 0's to the port, and each port's front serves it as
// its rank.
func TestDataParallelRanks(t *testing.T) {
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer ing.Close()
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Router: rt, Ingest: ing, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	b := &held{got: make(chan int, 2), release: make(chan struct{})}
	front, err := engine.NewOpenAIServer(engine.OpenAIConfig{Ranks: []engine.Backend{b, b}})
	if err != nil {
		t.Fatal(err)
	}
	lis := consecutivePorts(t)
	for r, l := range lis {
		hs := &http.Server{Handler: front.Handler(r)}
		go hs.Serve(l)
		defer hs.Close()
	}
	w := &kvrouterv1.Worker{WorkerId: "w", Model: "m", Endpoint: "http://" + lis[0].Addr().String(), DpSize: 2, BlockSize: 16}
	if err := srv.Register(w, server.SourceAPI, false); err != nil {
		t.Fatal(err)
	}
	p, err := epp.New(epp.Config{Router: srv, Fleet: epp.FleetFunc(srv.Fleet)})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p.Register(gs)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(pl)
	defer gs.Stop()
	g, err := gateway.New(gateway.Config{PickerAddr: pl.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	url := "http://" + serve(t, g)

	// Each prompt is cached on one rank (request 0's on rank 1, request 1's
	// on rank 0), so the router's choice does not depend on timing.
	want := []int{1, 0}
	prompts := make([][]uint32, 2)
	for i := range prompts {
		toks := make([]uint32, 256) // a prompt of its own: no shared prefix
		for k := range toks {
			toks[k] = uint32(1000*(i+1) + k)
		}
		prompts[i] = toks
		hashes := normalize.HashPrompt(normalize.Seed("", ""), toks, 16, nil, nil)
		blocks := make([]kv.Block, len(hashes))
		for k, h := range hashes {
			blocks[k] = kv.Block{EngineHash: uint64(1000*(i+1) + k + 1), BlockHash: h}
		}
		if err := idx.Store(kv.WorkerRank{ID: "w", DPRank: uint32(want[i])}, 0, false, kv.TierDevice, blocks); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	var ranks []int
	for i := 0; i < 2; i++ {
		go func() {
			ids := make([]string, len(prompts[i]))
			for k, tok := range prompts[i] {
				ids[k] = strconv.Itoa(int(tok))
			}
			body := `{"model":"m","max_tokens":1,"prompt":[` + strings.Join(ids, ",") + `]}`
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body) // to the end, which comes after the picker's marks
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
		ranks = append(ranks, <-b.got) // the request is on its rank before the next is sent
	}
	close(b.release)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if ranks[0] != want[0] || ranks[1] != want[1] {
		t.Fatalf("ranks served %v: want %v, each request on the port of the rank holding its prompt", ranks, want)
	}
	if n := rt.ActiveRequests(); n != 0 {
		t.Fatalf("%d requests still active", n)
	}
}
