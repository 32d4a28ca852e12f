package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// exitingRouter writes a script that counts its starts in a file and exits at
// once printing msg, the way a router that cannot bind exits.
func exitingRouter(t *testing.T, msg string) (bin, count string) {
	t.Helper()
	dir := t.TempDir()
	count = filepath.Join(dir, "starts")
	bin = filepath.Join(dir, "kvrouter")
	script := "#!/bin/sh\necho x >> " + count + "\necho '" + msg + "' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, count
}

func starts(t *testing.T, count string) int {
	t.Helper()
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "x")
}

// TestLaunchRouterHandsOverListeners: with no addresses given, the
// router is handed two loopback sockets bound by the harness (--grpc-addr
// fd:3 --http-addr fd:4, both descriptors open in the child) and is
// started once: no port is picked free and then raced for.
func TestLaunchRouterHandsOverListeners(t *testing.T) {
	dir := t.TempDir()
	bin, seen := filepath.Join(dir, "kvrouter"), filepath.Join(dir, "seen")
	script := "#!/bin/sh\necho \"$@\" > " + seen + "\nls /proc/$$/fd >> " + seen + "\necho x >> " + seen + ".starts\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := StartRouter(context.Background(), RouterConfig{Bin: bin, StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited during start") {
		t.Fatalf("err = %v", err)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	args, fds, _ := strings.Cut(string(b), "\n")
	if !strings.Contains(args, "--grpc-addr fd:3 --http-addr fd:4") {
		t.Fatalf("router args %q; want the inherited sockets", args)
	}
	if fields := strings.Fields(fds); !slices.Contains(fields, "3") || !slices.Contains(fields, "4") {
		t.Fatalf("descriptors open in the router: %v; want 3 and 4", fields)
	}
	if n := starts(t, seen+".starts"); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
	r, err := LaunchRouter(RouterConfig{Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if !strings.HasPrefix(r.GRPCAddr, "127.0.0.1:") || !strings.HasPrefix(r.HTTPAddr, "127.0.0.1:") || r.GRPCAddr == r.HTTPAddr {
		t.Fatalf("router addresses %q %q; want the two loopback sockets handed over", r.GRPCAddr, r.HTTPAddr)
	}
}

func TestStartRouterDoesNotRetryOtherFailures(t *testing.T) {
	bin, count := exitingRouter(t, "kvrouter: --policy: unknown")
	if _, err := StartRouter(context.Background(), RouterConfig{Bin: bin, StartTimeout: 10 * time.Second}); err == nil {
		t.Fatal("no error")
	}
	if n := starts(t, count); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
}

func TestStartRouterDoesNotRetryGivenAddresses(t *testing.T) {
	bin, count := exitingRouter(t, "bind: address already in use")
	cfg := RouterConfig{Bin: bin, GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", StartTimeout: 10 * time.Second}
	if _, err := StartRouter(context.Background(), cfg); err == nil {
		t.Fatal("no error")
	}
	if n := starts(t, count); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
}
