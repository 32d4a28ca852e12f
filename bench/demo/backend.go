package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// printTryCommands writes grpcurl and curl commands to try the router with.
func printTryCommands(w io.Writer, be *backend, model string, r trace.Request) {
	toks := r.Tokens(nil)[:48]
	ids := make([]string, len(toks))
	for i, t := range toks {
		ids[i] = fmt.Sprint(t)
	}
	local := func(a string) string { return strings.Replace(a, "127.0.0.1", "localhost", 1) }
	g := local(be.grpc[0])
	var b strings.Builder
	fmt.Fprintf(&b, `
Try it (in another terminal):
  grpcurl -plaintext %[1]s list
  grpcurl -plaintext -d '{"model":"%[2]s"}' %[1]s kvrouter.v1.Registry/ListWorkers
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Score
  grpcurl -plaintext -d '{"prompt":{"model":"%[2]s","token_ids":[%[3]s]}}' %[1]s kvrouter.v1.Router/Route
  curl -s http://%[4]s/metrics | grep '^kvrouter_'
  status page (workers and ranks, routing gain, recent decisions): http://%[4]s/status
(The token ids are the first 48 tokens of the trace's shared prefix, so every engine that served
a request holds them.)
`, g, model, strings.Join(ids, ","), local(be.http[0]))
	if len(be.grpc) > 1 {
		fmt.Fprintf(&b, `
%d replicas share NATS at %s (JetStream in %s); each is a full router:
`, len(be.grpc), be.nats.URL(), be.nats.StoreDir())
		for i := range be.grpc {
			fmt.Fprintf(&b, "  %s  grpcurl -plaintext %s grpc.health.v1.Health/Check; curl -s http://%s/metrics | grep '^kvrouter_'\n",
				harness.ReplicaID(i), local(be.grpc[i]), local(be.http[i]))
		}
		fmt.Fprintf(&b, `A worker registered on one replica is listed by all, e.g.
  grpcurl -plaintext -d '{"worker":{"worker_id":"extra","model":"%[1]s","endpoint":"sim://extra","kv_events_endpoint":"tcp://127.0.0.1:1","dp_size":1,"block_size":16}}' %[2]s kvrouter.v1.Registry/RegisterWorker
  grpcurl -plaintext -d '{"model":"%[1]s"}' %[3]s kvrouter.v1.Registry/ListWorkers
  grpcurl -plaintext -d '{"worker_id":"extra"}' %[3]s kvrouter.v1.Registry/UnregisterWorker
and a request routed by one replica can be finished on another:
  grpcurl -plaintext -d '{"request_id":"try-1","prompt":{"model":"%[1]s","token_ids":[%[4]s]}}' %[2]s kvrouter.v1.Router/Route
  grpcurl -plaintext -d '{"request_id":"try-1"}' %[3]s kvrouter.v1.Router/MarkFinished
`, model, local(be.grpc[0]), local(be.grpc[1]), strings.Join(ids, ","))
	}
	b.WriteString("Stop with Ctrl-C.\n\n")
	fmt.Fprint(w, b.String())
}

// backend is the router side of the demo: one router, or replicas on an
// embedded NATS server behind a gateway.
type backend struct {
	choose     replay.ChooseFunc
	marks      kvrouterv1.RouterClient
	grpc, http []string
	routers    []*harness.Router
	gw         *harness.Gateway
	nats       *harness.NATS
	log        *slog.Logger
}

func startRouter(ctx context.Context, rc harness.RouterConfig, fleet *harness.Fleet, model string, log *slog.Logger) (*backend, error) {
	router, err := harness.StartRouter(ctx, rc)
	if err != nil {
		return nil, err
	}
	be := &backend{routers: []*harness.Router{router}, log: log,
		grpc: []string{router.GRPCAddr}, http: []string{router.HTTPAddr},
		choose: replay.RouterChooser(router.Router, fleet, model), marks: router.Router}
	if err := fleet.Register(ctx, router.Registry, model, 20*time.Second); err != nil {
		be.close()
		return nil, err
	}
	return be, nil
}

func startReplicas(ctx context.Context, rc harness.RouterConfig, n, natsPort int, fleet *harness.Fleet, model string, log *slog.Logger) (_ *backend, err error) {
	be := &backend{log: log}
	defer func() {
		if err != nil {
			be.close()
		}
	}()
	if be.nats, err = harness.StartNATS(natsPort); err != nil {
		return nil, err
	}
	log.Info("embedded NATS server", "url", be.nats.URL(), "jetstream_dir", be.nats.StoreDir())
	reps, err := harness.StartReplicas(ctx, harness.ReplicasConfig{N: n, Router: rc, NATSURL: be.nats.URL()})
	if err != nil {
		return nil, err
	}
	be.routers = reps.Routers
	for _, r := range reps.Routers {
		be.grpc, be.http = append(be.grpc, r.GRPCAddr), append(be.http, r.HTTPAddr)
	}
	if err = reps.Register(ctx, fleet, model, 20*time.Second); err != nil {
		return nil, err
	}
	if be.gw, err = harness.NewGateway(harness.GatewayConfig{Addrs: be.grpc}); err != nil {
		return nil, err
	}
	be.choose, be.marks = replay.GatewayChooser(be.gw, fleet, model), be.gw.Marks()
	return be, nil
}

// exited reports a router that has exited.
func (be *backend) exited() error {
	for i, r := range be.routers {
		select {
		case <-r.Exited():
			return fmt.Errorf("router %d exited: %v", i, r.ExitErr())
		default:
		}
	}
	return nil
}

func (be *backend) close() {
	if be.gw != nil {
		be.gw.Close()
	}
	for _, r := range be.routers {
		if err := r.Stop(); err != nil {
			be.log.Warn("stop router", "err", err)
		}
	}
	if be.nats != nil {
		be.nats.Close()
	}
}
