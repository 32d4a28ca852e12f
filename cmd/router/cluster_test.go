package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/internal/app"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/testaddr"
)

// startReplica starts a router in cluster mode on ns.
func startReplica(t *testing.T, ns *natstest.Server, id string, args ...string) *router {
	t.Helper()
	return startRouter(t, append([]string{"--nats-url", ns.URL(), "--replica-id", id}, args...)...)
}

// poll calls cond until it holds, failing the test after a minute (a
// deadline for a loaded machine: a passing test never waits that long).
func poll(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > time.Minute {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loadOn is the active prefill blocks the router reports for each worker
// of model m, read from a Route without a request id (which adds no load).
func loadOn(t *testing.T, r *router, tokens []uint32) map[string]float64 {
	t.Helper()
	d, err := kvrouterv1.NewRouterClient(dial(t, r.grpcAddr)).Route(ctx10(t), &kvrouterv1.RouteRequest{
		Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: tokens}, MaxCandidates: 16})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, c := range d.GetCandidates() {
		out[c.GetWorkerId()] = c.GetPrefillBlocks()
	}
	return out
}

func seqTokens(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

// TestClusterRegistryAndMarks: a registration on one replica is routable on
// the other; a Route's load on A shows on B; MarkFinished sent to B ends it
// on A; an unregistration on B reaches A.
func TestClusterRegistryAndMarks(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns, "a")
	b := startReplica(t, ns, "b")
	regA := kvrouterv1.NewRegistryClient(dial(t, a.grpcAddr))
	for _, id := range []string{"w1", "w2"} {
		if _, err := regA.RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{
			WorkerId: id, Model: "m", Endpoint: id + ":8000"}}); err != nil {
			t.Fatal(err)
		}
	}
	took := poll(t, "B lists A's registrations", func() bool { return len(listWorkers(t, b)) == 2 })
	t.Logf("registration on A listed on B after %v", took)

	toks := seqTokens(1, 8*16)
	d, err := kvrouterv1.NewRouterClient(dial(t, a.grpcAddr)).Route(ctx10(t), &kvrouterv1.RouteRequest{
		Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: toks}, RequestId: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "A's Route is load on B", func() bool { return loadOn(t, b, toks)[d.GetWorkerId()] == 8 })

	// The gateway's MarkFinished lands on B.
	if _, err := kvrouterv1.NewRouterClient(dial(t, b.grpcAddr)).MarkFinished(ctx10(t), &kvrouterv1.RequestRef{RequestId: "req-1"}); err != nil {
		t.Fatalf("MarkFinished on the other replica: %v", err)
	}
	poll(t, "the finish on B ends the load on A", func() bool { return loadOn(t, a, toks)[d.GetWorkerId()] == 0 })

	if _, err := kvrouterv1.NewRegistryClient(dial(t, b.grpcAddr)).UnregisterWorker(ctx10(t), &kvrouterv1.UnregisterWorkerRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	poll(t, "A drops the worker B unregistered", func() bool { _, ok := listWorkers(t, a)["w1"]; return !ok })

	// The registry outlives every replica: a replica started after both
	// stopped lists w2.
	a.cmd.Process.Kill()
	b.cmd.Process.Kill()
	<-a.exited
	<-b.exited
	c := startReplica(t, ns, "c")
	if got := listWorkers(t, c); len(got) != 1 || got["w2"] != "api" {
		t.Fatalf("after every replica stopped, a new one lists %v; want w2 (api)", got)
	}
}

// TestClusterRegisterRace: two replicas register the same id with
// different endpoints at once, many times: one registration wins each
// time, the other is refused, and both replicas end on the winner.
func TestClusterRegisterRace(t *testing.T) {
	ns := natstest.Start(t)
	rs := []*router{startReplica(t, ns, "a"), startReplica(t, ns, "b")}
	clients := []kvrouterv1.RegistryClient{kvrouterv1.NewRegistryClient(dial(t, rs[0].grpcAddr)), kvrouterv1.NewRegistryClient(dial(t, rs[1].grpcAddr))}
	for round := range 10 {
		id := fmt.Sprintf("w%d", round)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				_, errs[i] = c.RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{
					WorkerId: id, Model: "m", Endpoint: fmt.Sprintf("host-%d:8000", i)}})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch status.Code(err) {
			case codes.OK:
				if winner >= 0 {
					t.Fatalf("round %d: both registrations of %s succeeded", round, id)
				}
				winner = i
			case codes.InvalidArgument: // the loser: already registered
			default:
				t.Fatalf("round %d: register on replica %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither registration of %s succeeded: %v", round, id, errs)
		}
		want := fmt.Sprintf("host-%d:8000", winner)
		for _, r := range rs {
			poll(t, "both replicas hold the winner", func() bool { return endpointOf(t, r, id) == want })
		}
	}
}

func endpointOf(t *testing.T, r *router, id string) string {
	t.Helper()
	lw, err := kvrouterv1.NewRegistryClient(dial(t, r.grpcAddr)).ListWorkers(ctx10(t), &kvrouterv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range lw.GetWorkers() {
		if w.GetWorker().GetWorkerId() == id {
			return w.GetWorker().GetEndpoint()
		}
	}
	return ""
}

// TestClusterNATSOutage: NATS stops while Routes and marks flow through
// both replicas; they go on routing, report the outage on the
// kvrouter.cluster health service, and agree on the load once NATS is back.
func TestClusterNATSOutage(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns, "a")
	b := startReplica(t, ns, "b")
	reg := kvrouterv1.NewRegistryClient(dial(t, a.grpcAddr))
	for _, id := range []string{"w1", "w2", "w3"} {
		if _, err := reg.RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: id, Model: "m"}}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "B lists the workers", func() bool { return len(listWorkers(t, b)) == 3 })
	rc := []kvrouterv1.RouterClient{kvrouterv1.NewRouterClient(dial(t, a.grpcAddr)), kvrouterv1.NewRouterClient(dial(t, b.grpcAddr))}
	n := 0
	routeSome := func(k int) {
		for range k {
			id := fmt.Sprintf("r%d", n)
			if _, err := rc[n%2].Route(ctx10(t), &kvrouterv1.RouteRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: seqTokens(n*1000, 64)}, RequestId: id}); err != nil {
				t.Fatalf("route %s: %v", id, err)
			}
			if n%3 == 0 { // finished on the other replica
				if _, err := rc[(n+1)%2].MarkFinished(ctx10(t), &kvrouterv1.RequestRef{RequestId: id}); err != nil {
					t.Fatalf("finish %s: %v", id, err)
				}
			}
			n++
		}
	}
	routeSome(30)
	ns.Stop()
	for _, r := range []*router{a, b} {
		poll(t, "the outage shows on kvrouter.cluster health", func() bool { return clusterHealth(t, r) == healthpb.HealthCheckResponse_NOT_SERVING })
		if st := overallHealth(t, r); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("overall health during the NATS outage: %v; want SERVING (routing goes on)", st)
		}
	}
	routeSome(30) // on local state
	// A registration without NATS is refused at once, and stays refused:
	// it must not land in the bucket once NATS is back (the lists of 4
	// below).
	regStart := time.Now()
	_, err := reg.RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{WorkerId: "w-outage", Model: "m"}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("register during the NATS outage: %v; want Unavailable", err)
	}
	t.Logf("RegisterWorker during the outage refused in %v", time.Since(regStart))
	ns.Restart()
	for _, r := range []*router{a, b} {
		poll(t, "kvrouter.cluster SERVING again", func() bool { return clusterHealth(t, r) == healthpb.HealthCheckResponse_SERVING })
	}
	routeSome(10)
	// The registry watchers survived the outage.
	regStart = time.Now()
	if _, err := kvrouterv1.NewRegistryClient(dial(t, b.grpcAddr)).RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{
		Worker: &kvrouterv1.Worker{WorkerId: "w4", Model: "m"}}); err != nil {
		t.Fatalf("register after the outage: %v", err)
	}
	t.Logf("RegisterWorker after the outage took %v", time.Since(regStart))
	took := poll(t, "A lists the worker B registered after the outage", func() bool { return len(listWorkers(t, a)) == 4 })
	t.Logf("a registration after the outage reached the other replica in %v", took)
	toks := seqTokens(7_000_000, 64)
	var la, lb map[string]float64
	defer func() {
		if t.Failed() {
			t.Logf("load on A %v, on B %v\nA:\n%s\nB:\n%s", la, lb, a.logs(), b.logs())
		}
	}()
	poll(t, "both replicas agree on every worker's load after the outage", func() bool {
		la, lb = loadOn(t, a, toks), loadOn(t, b, toks)
		for w, v := range la {
			if lb[w] != v {
				return false
			}
		}
		return len(la) == 4
	})
	if v := metricValue(t, a.httpAddr, "kvrouter_cluster_disconnects_total"); v < 1 {
		t.Fatalf("kvrouter_cluster_disconnects_total = %v after an outage", v)
	}
}

func clusterHealth(t *testing.T, r *router) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := healthpb.NewHealthClient(dial(t, r.grpcAddr)).Check(ctx10(t), &healthpb.HealthCheckRequest{Service: app.ClusterHealthService})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

func overallHealth(t *testing.T, r *router) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := healthpb.NewHealthClient(dial(t, r.grpcAddr)).Check(ctx10(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

// TestClusterUnreachableNATS: a router pointed at a NATS URL where nothing
// listens exits with a clear error, in bounded time.
func TestClusterUnreachableNATS(t *testing.T) {
	refused, err := testaddr.NewRefused()
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	url := "nats://" + refused.Addr()
	start := time.Now()
	out, err := exec.Command(binary, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", t.TempDir(),
		"--nats-url", url, "--nats-connect-timeout", "1s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--nats-url") || !strings.Contains(string(out), url) {
		t.Fatalf("router with unreachable NATS: err=%v output=%s; want an error naming --nats-url and the URL", err, out)
	}
	t.Logf("failed after %v: %s", time.Since(start), strings.TrimSpace(string(out)))
}

// metricValue reads an unlabelled metric (or the sum of a labelled one's
// series) from /metrics.
func metricValue(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// TestClusterBootstrapExact: a replica started with an empty state dir,
// after the only other one stopped, refuses a bad newest object by name,
// restores the newest good snapshot in the object store, catches up from
// each engine's replay socket from the snapshot's positions (the engines
// keep too little history for a replay from the start), and then holds
// exactly what the engines cache.
func TestClusterBootstrapExact(t *testing.T) {
	ns := natstest.Start(t)
	var engines []*engine.Engine
	for i := range 2 {
		e, err := engine.New(engine.Config{ID: fmt.Sprintf("e%d", i), CapacityBlocks: 48, ReplayEndpoint: "tcp://127.0.0.1:0",
			ReplayBuffer: 16, HashSeed: uint64(100 + i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		engines = append(engines, e)
	}
	a := startReplica(t, ns, "a", "--snapshot-interval", "100ms")
	reg := kvrouterv1.NewRegistryClient(dial(t, a.grpcAddr))
	for _, e := range engines {
		if _, err := reg.RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{Worker: &kvrouterv1.Worker{
			WorkerId: e.ID(), Model: "m", KvEventsEndpoint: e.Endpoint(), ReplayEndpoint: e.ReplayEndpoint()}}); err != nil {
			t.Fatal(err)
		}
	}
	var prompts [][]uint32
	serve := func(from, n int) {
		for i := from; i < from+n; i++ {
			p := append(seqTokens(0, 32), seqTokens(10_000*(i%7)+i, 16*(1+i%4))...) // shared prefix, evictions
			prompts = append(prompts, p)
			if _, err := engines[i%2].ServeAndPublish(engine.Request{Tokens: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll(t, "A subscribed to both engines", func() bool { return connectedRanks(t, a) == 2 })
	// One batch per engine first: once A has them, its subscriptions
	// receive (a ZMQ subscription takes effect a moment after connecting).
	serve(0, 2)
	poll(t, "A has the first batches", func() bool { return exactAgainst(t, a, engines, prompts) == "" })
	serve(2, 58) // past the engines' replay buffers
	poll(t, "A exact", func() bool { return exactAgainst(t, a, engines, prompts) == "" })
	uploads := metricValue(t, a.httpAddr, `kvrouter_cluster_snapshot_uploads_total{result="ok"}`)
	poll(t, "A uploads a snapshot of the exact index", func() bool {
		return metricValue(t, a.httpAddr, `kvrouter_cluster_snapshot_uploads_total{result="ok"}`) > uploads
	})
	// A stops (its shutdown snapshot uploaded); the engines go on: the
	// newcomer gets these by replay.
	checkSIGTERMDrains(t, a)
	serve(60, 6)
	// The newest object is bad: it is refused by name, the one before used.
	bad, err := cluster.Connect(cluster.Config{URL: ns.URL(), ReplicaID: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	badObj, err := bad.PutSnapshot(ctx10(t), func(w io.Writer) error { _, err := w.Write([]byte("not a snapshot")); return err })
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	c := startReplica(t, ns, "c")
	serving := time.Since(start)
	// Both lines are written before the replica reports SERVING, but the
	// test reads them from its stderr pipe on another goroutine, which may
	// not have got that far yet.
	logs := waitLogs(c, "index restored from the snapshot store", `"object":"snapshot-a-`, "snapshot object refused", badObj.Name)
	if !strings.Contains(logs, "index restored from the snapshot store") || !strings.Contains(logs, `"object":"snapshot-a-`) {
		t.Fatalf("the new replica did not restore A's snapshot from the store:\n%s", logs)
	}
	if !strings.Contains(logs, "snapshot object refused") || !strings.Contains(logs, badObj.Name) {
		t.Fatalf("the bad object %s was not refused by name:\n%s", badObj.Name, logs)
	}
	var why string
	exact := poll(t, "the new replica exact", func() bool { why = exactAgainst(t, c, engines, prompts); return why == "" })
	t.Logf("new replica SERVING after %v, exact %v later", serving, exact)
}

func connectedRanks(t *testing.T, r *router) int {
	t.Helper()
	lw, err := kvrouterv1.NewRegistryClient(dial(t, r.grpcAddr)).ListWorkers(ctx10(t), &kvrouterv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range lw.GetWorkers() {
		if w.GetConnected() {
			n++
		}
	}
	return n
}

// exactAgainst compares the router's block counts and Score of every
// prompt with the engines' caches; "" when they agree.
func exactAgainst(t *testing.T, r *router, engines []*engine.Engine, prompts [][]uint32) string {
	t.Helper()
	lw, err := kvrouterv1.NewRegistryClient(dial(t, r.grpcAddr)).ListWorkers(ctx10(t), &kvrouterv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cached := map[string]uint64{}
	for _, w := range lw.GetWorkers() {
		cached[w.GetWorker().GetWorkerId()] = w.GetCachedBlocks()
	}
	for _, e := range engines {
		if got, want := cached[e.ID()], uint64(e.Stats().CachedNow); got != want {
			return fmt.Sprintf("%s: router counts %d blocks, engine holds %d", e.ID(), got, want)
		}
	}
	rc := kvrouterv1.NewRouterClient(dial(t, r.grpcAddr))
	for i, p := range prompts {
		res, err := rc.Score(ctx10(t), &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: p}})
		if err != nil {
			t.Fatal(err)
		}
		matched := map[string]uint32{}
		for _, s := range res.GetScores() {
			matched[s.GetWorkerId()] = s.GetMatchedBlocks()
		}
		for _, e := range engines {
			if got, want := matched[e.ID()], uint32(e.Overlap(e.BlockHashes(p, nil))); got != want {
				return fmt.Sprintf("prompt %d on %s: router matches %d blocks, engine holds %d", i, e.ID(), got, want)
			}
		}
	}
	return ""
}

// TestClusterNATSTLS: with --nats-tls-ca and a client certificate the
// router joins a NATS server that requires mTLS; without the certificate it
// is refused with an error naming --nats-url.
func TestClusterNATSTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "nats-ca")
	_, _, serverPair := ca.issue(t, "nats-server", true)
	clientCert, clientKey, _ := ca.issue(t, "kvrouter", false)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ns := natstest.StartWith(t, func(o *natsserver.Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
		o.TLS, o.TLSVerify = true, true
	})
	caPath := filepath.Join(dir, "nats-ca.pem")
	r := startReplica(t, ns, "a", "--nats-tls-ca", caPath, "--nats-tls-cert", clientCert, "--nats-tls-key", clientKey)
	if st := clusterHealth(t, r); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("kvrouter.cluster health over mTLS: %v", st)
	}
	out, err := exec.Command(binary, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", t.TempDir(),
		"--nats-url", ns.URL(), "--nats-tls-ca", caPath, "--nats-connect-timeout", "2s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--nats-url") {
		t.Fatalf("router without a client certificate: err=%v output=%s; want a refusal naming --nats-url", err, out)
	}
	t.Logf("without a client certificate: %s", strings.TrimSpace(string(out)))
}

// TestClusterShareLoadOff: with --nats-share-load=false the registry is
// still shared but the load is not: a MarkFinished sent to the other
// replica is NotFound, as with two lone routers.
func TestClusterShareLoadOff(t *testing.T) {
	ns := natstest.Start(t)
	a := startReplica(t, ns, "a", "--nats-share-load=false")
	b := startReplica(t, ns, "b", "--nats-share-load=false")
	if _, err := kvrouterv1.NewRegistryClient(dial(t, a.grpcAddr)).RegisterWorker(ctx10(t), &kvrouterv1.RegisterWorkerRequest{
		Worker: &kvrouterv1.Worker{WorkerId: "w1", Model: "m"}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "B lists A's registration", func() bool { return len(listWorkers(t, b)) == 1 })
	if _, err := kvrouterv1.NewRouterClient(dial(t, a.grpcAddr)).Route(ctx10(t), &kvrouterv1.RouteRequest{
		Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: seqTokens(1, 64)}, RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	_, err := kvrouterv1.NewRouterClient(dial(t, b.grpcAddr)).MarkFinished(ctx10(t), &kvrouterv1.RequestRef{RequestId: "r1"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("MarkFinished on the other replica without load sharing: %v; want NotFound", err)
	}
}

// TestClusterSameConfigFile: replicas started at once with the same
// workers: list all start, and each lists them all from the file.
func TestClusterSameConfigFile(t *testing.T) {
	ns := natstest.Start(t)
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("static-%d", i))
	}
	cfg := writeConfig(t, t.TempDir(), "fleet.yaml", ids...)
	var rs []*router
	for _, id := range []string{"a", "b", "c"} {
		rs = append(rs, launchRouter(t, "--nats-url", ns.URL(), "--replica-id", id, "--config", cfg))
	}
	for _, r := range rs {
		waitServing(t, r)
		poll(t, "every replica lists the file's workers", func() bool {
			got := listWorkers(t, r)
			for _, id := range ids {
				if got[id] != "config" {
					return false
				}
			}
			return len(got) == len(ids)
		})
	}
}
