package attack

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

var attacks = []attack{
	{"zmq-4m-empty-events", "one 4 MiB batch of 4,000,000 empty events from a hostile publisher the router dials", attackEmptyEvents},
	{"zmtp-60mib-claims", "30 TCP connections to a router-bound rank: ZMTP greeting, a frame header claiming 60 MiB, silence", attackClaims},
	{"score-40k-mm-items", "one Score with 40,000 multimodal items over 262,144 tokens (and one at 1,024 items)", attackMMItems},
	{"route-2kib-ids", "Routes with fresh 2 KiB request ids, never finished", attackLongIDs},
	{"route-active-flood", "Routes with fresh short request ids, never finished, past --max-active-requests", attackActiveFlood},
	{"zmtp-garbage", "connections to a router-bound rank sending random bytes (some after a valid greeting)", attackGarbage},
	{"msgpack-truncated", "truncated msgpack batches from a hostile publisher the router dials", attackTruncated},
	{"grpc-oversized", "Scores of 5 MiB (over gRPC's 4 MiB default)", attackOversized},
	{"register-flood", "RegisterWorker with fresh ids past --max-workers, then register/unregister churn of one id", attackRegFlood},
}

// codeCounts counts gRPC status codes.
type codeCounts struct {
	mu sync.Mutex
	n  map[codes.Code]int
	// maxLat is the slowest call.
	maxLat time.Duration
}

func (c *codeCounts) add(err error, lat time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[codes.Code]int{}
	}
	c.n[status.Code(err)]++
	c.maxLat = max(c.maxLat, lat)
}

func (c *codeCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		if n := c.n[code]; n > 0 {
			s = append(s, fmt.Sprintf("%s %d", code, n))
		}
	}
	return strings.Join(s, ", ") + fmt.Sprintf(" (slowest %v)", c.maxLat.Round(time.Millisecond))
}

func (c *codeCounts) get(code codes.Code) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[code]
}

func (c *codeCounts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, n := range c.n {
		t += n
	}
	return t
}

// unbounded is flood's bound when only ctx ends it.
const unbounded time.Duration = 0

// flood calls fn(i) for i in [0, n) from conc goroutines until done or the
// time bound passes.
func flood(ctx context.Context, n, conc int, bound time.Duration, fn func(ctx context.Context, i int)) int {
	if bound != unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(ctx, i)
			}
		}()
	}
	wg.Wait()
	return int(min(next.Load(), int64(n)))
}

// hostileWorker registers a worker of the model under a fresh id.
func (e *env) hostileWorker(ctx context.Context, kvEndpoint string) (string, error) {
	id := fmt.Sprintf("hostile-%02d", e.hostN.Add(1))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := e.rt.Registry.RegisterWorker(cctx, &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{
		WorkerId: id, Model: e.model, Endpoint: "sim://" + id, KvEventsEndpoint: kvEndpoint, DpSize: 1, BlockSize: 16}})
	if err != nil {
		return "", fmt.Errorf("register %s (%s): %w", id, kvEndpoint, err)
	}
	return id, nil
}

func (e *env) unregister(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := e.rt.Registry.UnregisterWorker(ctx, &kvrouterv1.UnregisterWorkerRequest{WorkerId: id}); err != nil {
		e.fail("unregister %s: %v", id, err)
	}
}

// status is a worker's rank 0 status, or nil.
func (e *env) status(ctx context.Context, id string) *kvrouterv1.WorkerStatus {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.rt.Registry.ListWorkers(cctx, &kvrouterv1.ListWorkersRequest{Model: e.model})
	if err != nil {
		return nil
	}
	for _, w := range resp.Workers {
		if w.GetWorker().GetWorkerId() == id && w.DpRank == 0 {
			return w
		}
	}
	return nil
}

func describe(w *kvrouterv1.WorkerStatus) string {
	if w == nil {
		return "hostile worker not listed"
	}
	return fmt.Sprintf("hostile rank: connected %v, last_seq %d, events_applied %d, gaps %d, decode_errors %d, cached_blocks %d, reconnects %d",
		w.Connected, w.LastSeq, w.EventsApplied, w.Gaps, w.DecodeErrors, w.CachedBlocks, w.Reconnects)
}

// hostilePub is a PUB socket the router dials, registered as a worker.
type hostilePub struct {
	sock zmq4.Socket
	id   string
	seq  uint64
}

func (e *env) newHostilePub(ctx context.Context) (*hostilePub, error) {
	sock := zmq4.NewPub(context.Background())
	if err := sock.Listen("tcp://127.0.0.1:0"); err != nil {
		sock.Close()
		return nil, err
	}
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", sock.Addr().(*net.TCPAddr).Port)
	id, err := e.hostileWorker(ctx, ep)
	if err != nil {
		sock.Close()
		return nil, err
	}
	deadline := time.Now().Add(e.patience(10 * time.Second))
	for {
		if t, ok := sock.(zmq4.Topics); ok && len(t.Topics()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			sock.Close()
			e.unregister(id)
			return nil, fmt.Errorf("the router did not subscribe to %s", ep)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &hostilePub{sock: sock, id: id}, nil
}

func (p *hostilePub) send(payload []byte) error {
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, p.seq)
	p.seq++
	return p.sock.Send(zmq4.NewMsgFrom([]byte{}, seq, payload))
}

func (p *hostilePub) close(e *env) {
	e.unregister(p.id)
	p.sock.Close()
}

// emptyEventsBatch is [ts, [n x []], 0] in msgpack: n one-byte events.
func emptyEventsBatch(n int) []byte {
	b := make([]byte, 0, n+32)
	b = append(b, 0x93, 0xcb)
	b = binary.BigEndian.AppendUint64(b, 0x41d9000000000000) // a float64 timestamp
	b = append(b, 0xdd)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for i := 0; i < n; i++ {
		b = append(b, 0x90)
	}
	return append(b, 0x00)
}

func attackEmptyEvents(ctx context.Context, e *env) (string, error) {
	p, err := e.newHostilePub(ctx)
	if err != nil {
		return "", err
	}
	defer p.close(e)
	batch := emptyEventsBatch(4_000_000)
	if err := p.send(batch); err != nil {
		return "", err
	}
	time.Sleep(e.scale.hold)
	return fmt.Sprintf("sent %s; %s", Bytes(int64(len(batch))), describe(e.status(ctx, p.id))), nil
}

// boundRank registers a hostile worker whose rank the router binds on a
// port the kernel picks, learns the port from the router's log, and waits
// until it accepts connections.
func (e *env) boundRank(ctx context.Context) (id, addr string, err error) {
	if id, err = e.hostileWorker(ctx, "@tcp://127.0.0.1:0"); err != nil {
		return "", "", err
	}
	if addr, err = e.bound.wait(ctx, id, e.patience(10*time.Second)); err != nil {
		e.unregister(id)
		return "", "", err
	}
	deadline := time.Now().Add(e.patience(10 * time.Second))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return id, addr, nil
		}
		if time.Now().After(deadline) {
			e.unregister(id)
			return "", "", fmt.Errorf("the router did not accept on %s, bound for @tcp://127.0.0.1:0: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// zmtpGreeting is a ZMTP 3.0 NULL-mechanism greeting.
func zmtpGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:], "NULL")
	return g
}

// zmtpReadyPub is a READY command announcing a PUB socket.
func zmtpReadyPub() []byte {
	body := []byte{5}
	body = append(body, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, 3)
	body = append(body, "PUB"...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

func attackClaims(ctx context.Context, e *env) (string, error) {
	id, addr, err := e.boundRank(ctx)
	if err != nil {
		return "", err
	}
	defer e.unregister(id)
	const conns = 30
	var cs []net.Conn
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	refusedEarly := 0
	for i := 0; i < conns; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			refusedEarly++
			continue
		}
		cs = append(cs, c)
		msg := zmtpGreeting()
		claim := uint64(60 << 20)
		switch i % 3 {
		case 0: // handshake done, then a message frame claiming 60 MiB
			msg = append(msg, zmtpReadyPub()...)
			msg = append(msg, 0x02)
		case 1: // a command frame claiming 60 MiB in place of READY
			msg = append(msg, 0x06)
		case 2: // a message frame claiming 15 MiB (under a 16 MiB maximum), 64 KiB of it sent
			msg = append(msg, zmtpReadyPub()...)
			msg = append(msg, 0x02)
			claim = 15 << 20
		}
		msg = binary.BigEndian.AppendUint64(msg, claim)
		if i%3 == 2 {
			msg = append(msg, make([]byte, 64<<10)...)
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(msg)
	}
	// Silence; count the connections the router closes meanwhile.
	closed := make([]atomic.Bool, len(cs))
	var slowest atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(e.scale.hold * 3))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				closed[i].Store(true)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for i := range closed {
		if closed[i].Load() {
			n++
		}
	}
	return fmt.Sprintf("%d connected (%d refused at dial; 20 claim 60 MiB, 10 claim 15 MiB and send 64 KiB); the router closed %d within %v of silence (the last after %v)",
		len(cs), refusedEarly, n, e.scale.hold*3, time.Duration(slowest.Load()).Round(time.Millisecond)), nil
}

// mmPrompt is a prompt of tokens tokens with items multimodal items spread over it.
func (e *env) mmPrompt(tokens, items int) *kvrouterv1.Prompt {
	p := &kvrouterv1.Prompt{Model: e.model, TokenIds: make([]uint32, tokens)}
	for i := range p.TokenIds {
		p.TokenIds[i] = uint32(i % 16000)
	}
	step := tokens / items
	for i := 0; i < items; i++ {
		p.MmItems = append(p.MmItems, &kvrouterv1.MultimodalItem{
			Hash: fmt.Sprintf("%064x", uint64(i)*0x9E3779B97F4A7C15), Offset: uint32(i * step), Length: uint32(max(step, 1))})
	}
	return p
}

// timedRPC runs one RPC and measures the router's CPU across it.
func (e *env) timedRPC(fn func() error) (error, time.Duration, float64) {
	c0, _ := e.rt.CPUTime()
	t := time.Now()
	err := fn()
	lat := time.Since(t)
	time.Sleep(50 * time.Millisecond) // let work after the answer show
	c1, _ := e.rt.CPUTime()
	cpu := (c1 - c0).Seconds()
	e.rpcCPU = max(e.rpcCPU, cpu)
	return err, lat, cpu
}

func attackMMItems(ctx context.Context, e *env) (string, error) {
	var out []string
	for _, items := range []int{40000, 1024} {
		// Marshalled before the clock starts: the bar is the router's
		// answer, not this client encoding 3 MiB (which takes longer than
		// the router's refusal in a -race build of the test).
		req, err := proto.Marshal(&kvrouterv1.ScoreRequest{Prompt: e.mmPrompt(262144, items)})
		if err != nil {
			return "", fmt.Errorf("marshal the Score: %w", err)
		}
		err, lat, cpu := e.timedRPC(func() error {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return e.rt.Conn.Invoke(cctx, kvrouterv1.Router_Score_FullMethodName, &req, &kvrouterv1.ScoreResponse{},
				grpc.ForceCodec(replay.RawCodec{}))
		})
		out = append(out, fmt.Sprintf("%d items: %s in %v, %.2f s CPU", items, status.Code(err), lat.Round(time.Millisecond), cpu))
		if items == 40000 && status.Code(err) != codes.InvalidArgument {
			e.fail("40,000 items: want InvalidArgument, got %v", err)
		}
		if lat > time.Second && !e.cfg.Untimed {
			e.fail("%d items: the Score took %v", items, lat.Round(time.Millisecond))
		}
	}
	return strings.Join(out, "; "), nil
}

func (e *env) floodRoutes(ctx context.Context, idLen int, prefix string) *codeCounts {
	var cc codeCounts
	prompt := &kvrouterv1.Prompt{Model: e.model, TokenIds: e.randPrompt(64, 64)}
	pad := strings.Repeat("x", max(idLen-len(prefix)-12, 0))
	flood(ctx, e.scale.routes, 8, e.scale.attackTime, func(ctx context.Context, i int) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		t := time.Now()
		_, err := e.rt.Router.Route(cctx, &kvrouterv1.RouteRequest{Prompt: prompt, MaxCandidates: 1,
			RequestId: fmt.Sprintf("%s%s%012d", prefix, pad, i)})
		if ctx.Err() == nil {
			cc.add(err, time.Since(t))
		}
	})
	return &cc
}

func attackLongIDs(ctx context.Context, e *env) (string, error) {
	cc := e.floodRoutes(ctx, 2048, "long-")
	if n := cc.total() - cc.get(codes.InvalidArgument); n > 0 {
		e.fail("%d of %d Routes with 2 KiB ids were not InvalidArgument", n, cc.total())
	}
	return fmt.Sprintf("%d Routes: %s", cc.total(), cc), nil
}

func attackActiveFlood(ctx context.Context, e *env) (string, error) {
	cc := e.floodRoutes(ctx, 0, "flood-")
	ok, rex := cc.get(codes.OK), cc.get(codes.ResourceExhausted)
	if ok > e.cfg.MaxActive {
		e.fail("%d Routes accepted, over --max-active-requests %d", ok, e.cfg.MaxActive)
	}
	if cc.total() > e.cfg.MaxActive && rex == 0 {
		e.fail("no ResourceExhausted past --max-active-requests %d", e.cfg.MaxActive)
	}
	return fmt.Sprintf("%d Routes (--max-active-requests %d): %s", cc.total(), e.cfg.MaxActive, cc), nil
}

func attackGarbage(ctx context.Context, e *env) (string, error) {
	id, addr, err := e.boundRank(ctx)
	if err != nil {
		return "", err
	}
	defer e.unregister(id)
	var closedByRouter, dialFail atomic.Int64
	flood(ctx, e.scale.garbageConns, 4, e.scale.attackTime, func(ctx context.Context, i int) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			dialFail.Add(1)
			return
		}
		defer c.Close()
		junk := make([]byte, 64<<10)
		_, _ = rand.Read(junk)
		if i%2 == 1 {
			copy(junk, zmtpGreeting())
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, werr := c.Write(junk)
		_, rerr := io.Copy(io.Discard, c)
		var ne net.Error
		if werr != nil || !(errors.As(rerr, &ne) && ne.Timeout()) {
			closedByRouter.Add(1)
		}
	})
	return fmt.Sprintf("%d connections of 64 KiB garbage: %d closed by the router within 1 s, %d refused at dial; %s",
		e.scale.garbageConns, closedByRouter.Load(), dialFail.Load(), describe(e.status(ctx, id))), nil
}

func attackTruncated(ctx context.Context, e *env) (string, error) {
	p, err := e.newHostilePub(ctx)
	if err != nil {
		return "", err
	}
	defer p.close(e)
	n := 0
	for i := 0; i < e.scale.truncated && ctx.Err() == nil; i++ {
		toks := e.randPrompt(64, 256)
		hashes := engine.ChainHashes(uint64(i)+99, 16, toks, nil)
		b, err := engine.Encode(engine.FormatVLLMMap, time.Now(), 0, []engine.Event{{Kind: engine.Stored, Hashes: hashes,
			Tokens: toks[:len(hashes)*16], BlockSize: 16}})
		if err != nil {
			return "", err
		}
		e.rngMu.Lock()
		cut := 1 + e.rng.IntN(len(b)-1)
		e.rngMu.Unlock()
		if err := p.send(b[:cut]); err != nil {
			return "", err
		}
		n++
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(e.scale.hold)
	st := e.status(ctx, p.id)
	if st != nil && st.CachedBlocks > 0 {
		e.fail("the hostile rank holds %d blocks from truncated batches", st.CachedBlocks)
	}
	return fmt.Sprintf("%d truncated batches; %s", n, describe(st)), nil
}

func attackOversized(ctx context.Context, e *env) (string, error) {
	var cc codeCounts
	toks := make([]uint32, (5<<20)/4)
	for i := range toks {
		toks[i] = 1<<21 + uint32(i%1000) // 4-byte varints: 5 MiB on the wire
	}
	p := &kvrouterv1.Prompt{Model: e.model, TokenIds: toks}
	flood(ctx, e.scale.oversized, 2, e.scale.attackTime, func(ctx context.Context, i int) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t := time.Now()
		_, err := e.rt.Router.Score(cctx, &kvrouterv1.ScoreRequest{Prompt: p}, grpc.MaxCallSendMsgSize(64<<20))
		cc.add(err, time.Since(t))
	})
	if n := cc.total() - cc.get(codes.ResourceExhausted); n > 0 {
		e.fail("%d of %d oversized Scores were not ResourceExhausted", n, cc.total())
	}
	return fmt.Sprintf("%d Scores of 5 MiB: %s", cc.total(), &cc), nil
}

func attackRegFlood(ctx context.Context, e *env) (string, error) {
	refused, err := testaddr.NewRefused() // held, never listening: the router dials in vain
	if err != nil {
		return "", err
	}
	defer refused.Close()
	ep := "tcp://" + refused.Addr()
	var cc codeCounts
	var mu sync.Mutex
	var registered []string
	worker := func(id string) *kvrouterv1.Worker {
		return &kvrouterv1.Worker{WorkerId: id, Model: e.model, Endpoint: "sim://" + id, KvEventsEndpoint: ep, DpSize: 1, BlockSize: 16}
	}
	flood(ctx, e.scale.regs, 8, e.scale.attackTime, func(ctx context.Context, i int) {
		id := fmt.Sprintf("flood-%06d", i)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		t := time.Now()
		_, err := e.rt.Registry.RegisterWorker(cctx, &kvrouterv1.RegisterWorkerRequest{Worker: worker(id)})
		cc.add(err, time.Since(t))
		if err == nil {
			mu.Lock()
			registered = append(registered, id)
			mu.Unlock()
		}
	})
	if ok := cc.get(codes.OK); ok > e.cfg.MaxWorkers {
		e.fail("%d registrations accepted, over --max-workers %d", ok, e.cfg.MaxWorkers)
	}
	if cc.total() > e.cfg.MaxWorkers && cc.get(codes.ResourceExhausted) == 0 {
		e.fail("no ResourceExhausted past --max-workers %d", e.cfg.MaxWorkers)
	}
	// Unregister the whole flood (every one must go, however long that
	// takes), then churn one id.
	var uc codeCounts
	flood(ctx, len(registered), 8, unbounded, func(ctx context.Context, i int) {
		cctx, cancel := context.WithTimeout(ctx, e.patience(15*time.Second))
		defer cancel()
		t := time.Now()
		_, err := e.rt.Registry.UnregisterWorker(cctx, &kvrouterv1.UnregisterWorkerRequest{WorkerId: registered[i]})
		uc.add(err, time.Since(t))
	})
	if n := uc.total() - uc.get(codes.OK); n > 0 || uc.total() < len(registered) {
		e.fail("unregistering the flood: %s of %d", &uc, len(registered))
	}
	// The churn stops at the time bound between pairs, never inside a call:
	// a call the bound cut would count as a failure the router did not make.
	var ch codeCounts
	bound := time.Now().Add(e.scale.attackTime)
	call := func(fn func(ctx context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, e.patience(15*time.Second))
		defer cancel()
		t := time.Now()
		ch.add(fn(cctx), time.Since(t))
	}
	for i := 0; i < e.scale.churn && ctx.Err() == nil && time.Now().Before(bound); i++ {
		call(func(ctx context.Context) error {
			_, err := e.rt.Registry.RegisterWorker(ctx, &kvrouterv1.RegisterWorkerRequest{Worker: worker("churn")})
			return err
		})
		call(func(ctx context.Context) error {
			_, err := e.rt.Registry.UnregisterWorker(ctx, &kvrouterv1.UnregisterWorkerRequest{WorkerId: "churn"})
			return err
		})
	}
	if n := ch.total() - ch.get(codes.OK); n > 0 {
		e.fail("churn: %s", &ch)
	}
	return fmt.Sprintf("%d RegisterWorker: %s; unregistered %d (%s); churn %d calls: %s",
		cc.total(), &cc, len(registered), &uc, ch.total(), &ch), nil
}
