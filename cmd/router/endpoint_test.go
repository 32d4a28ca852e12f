package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// writeEndpointConfig writes a config file with one static worker whose
// kv_events_endpoint is ep, as the README's example does.
func writeEndpointConfig(t *testing.T, ep string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	yaml := fmt.Sprintf("workers:\n  - worker_id: vllm-0\n    model: m\n    kv_events_endpoint: %q\n", ep)
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigEndpointConcreteHostIsDialled: kv_events_endpoint
// tcp://127.0.0.1:PORT, the address where an engine bound (as vLLM's
// tcp://*:PORT does), makes the router dial it.
func TestConfigEndpointConcreteHostIsDialled(t *testing.T) {
	engine, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	// No engine speaks ZMTP here: readiness need not wait for a catch-up.
	startRouter(t, "--config", writeEndpointConfig(t, "tcp://"+engine.Addr().String()), "--catch-up-wait", "0")
	engine.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	nc, err := engine.Accept()
	if err != nil {
		t.Fatalf("the router never dialled the engine's address: %v", err)
	}
	nc.Close()
}

// TestConfigEndpointWildcardBinds: vLLM's literal tcp://*:PORT makes the
// router bind PORT on every interface for an engine that connects; with an
// engine already bound on PORT the router refuses to start and says what to
// register instead.
func TestConfigEndpointWildcardBinds(t *testing.T) {
	// Port 0: the kernel picks the port the router binds, and the router
	// logs it; a port probed free beforehand could be taken before the
	// router binds it.
	r := startRouter(t, "--config", writeEndpointConfig(t, "tcp://*:0"), "--catch-up-wait", "0")
	port := boundPort(t, r)
	nc, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second)
	if err != nil {
		t.Fatalf("the router is not listening for engines on tcp://*:0 (bound %d): %v", port, err)
	}
	nc.Close()

	engine, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	ep := fmt.Sprintf("tcp://*:%d", engine.Addr().(*net.TCPAddr).Port)
	out, err := exec.Command(binary, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--state-dir", t.TempDir(), "--config", writeEndpointConfig(t, ep)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "address already in use") || !strings.Contains(string(out), "register the engine's address") {
		t.Fatalf("router with %s while an engine is bound there: err=%v output=%s; want a failure saying what to register", ep, err, out)
	}
}

// boundPort waits for the router's log record of a kv_events_endpoint it
// bound and returns the port it names under "listening".
func boundPort(t *testing.T, r *router) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, line := range strings.Split(r.logs(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			if addr, ok := rec["listening"].(string); ok {
				tcp, err := net.ResolveTCPAddr("tcp", addr)
				if err != nil {
					t.Fatalf("bound address %q: %v", addr, err)
				}
				return tcp.Port
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log record names the bound kv events address:\n%s", r.logs())
		}
		time.Sleep(5 * time.Millisecond) // polling the log reader's progress
	}
}

// TestReadinessWaitsForCatchUp: a router whose engine never answers stays
// NOT_SERVING for --catch-up-wait, then serves and logs which rank is
// behind.
func TestReadinessWaitsForCatchUp(t *testing.T) {
	engine, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks ZMTP
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	r := launchRouter(t, "--config", writeEndpointConfig(t, "tcp://"+engine.Addr().String()), "--catch-up-wait", "4s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(dial(t, r.grpcAddr))
	if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health right after start: %v, %v; want NOT_SERVING while the rank has not caught up", resp, err)
	}
	const warning = "serving before every rank caught up"
	for {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING && strings.Contains(r.logs(), warning) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("not SERVING with the warning %q: %v, %v; log:\n%s", warning, resp, err, r.logs())
		}
		time.Sleep(5 * time.Millisecond) // polling health and the log for the deadline's outcome
	}
}
