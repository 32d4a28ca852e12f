package python_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/examples/internal/routertest"
)

// python is Debian's interpreter, where python3-grpcio and python3-protobuf
// install (.ci/run installs them; protoc and grpc_python_plugin generate
// the stubs).
const python = "/usr/bin/python3"

const model = "example-model"

type result struct {
	Endpoint string `json:"endpoint"`
	DPRank   *int   `json:"dp_rank"`
	Routed   bool   `json:"routed"`
	Chunks   int    `json:"chunks"`
}

func tokens(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(2000 + i)
	}
	return strings.Join(ids, ",")
}

// gateway starts gateway.py for one request.
func gateway(t *testing.T, r *routertest.Router, eng *routertest.Engine, model, id string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(python, "gateway.py", "--router", r.GRPCAddr, "--model", model,
		"--tokens", tokens(64), "--request-id", id, "--fallback", eng.Addr())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out, &errb
}

func wait(t *testing.T, cmd *exec.Cmd, out, errb *bytes.Buffer) result {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gateway.py: %v\n%s", err, errb)
	}
	var res result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("gateway.py printed %q: %v\n%s", out, err, errb)
	}
	return res
}

func setup(t *testing.T, n int) (*routertest.Router, *routertest.Engine) {
	r := routertest.Start(t)
	eng := routertest.StartEngine(t, n)
	r.Register(t, "engine-0", model, eng.Addr(), 2)
	return r, eng
}

// TestPythonLifecycle: the Python gateway routes, sends the rank header,
// reads the stream and finishes the request; mid-stream the request is
// load on the router, after the end it is not.
func TestPythonLifecycle(t *testing.T) {
	r, eng := setup(t, 4)
	seen, release := eng.HoldAfterFirst()
	cmd, out, errb := gateway(t, r, eng, model, "py-1")
	d := <-seen
	if n := r.ActiveRequests(t); n != 1 {
		t.Fatalf("mid-stream: %v active requests, want 1", n)
	}
	close(release)
	res := wait(t, cmd, out, errb)
	if !res.Routed || res.DPRank == nil || res.Endpoint != eng.Addr() || res.Chunks != 4 {
		t.Fatalf("result %+v, want routed to %s with 4 chunks", res, eng.Addr())
	}
	if d.Rank != strconv.Itoa(*res.DPRank) || d.Path != "/v1/completions" {
		t.Fatalf("engine got %+v, want the rank header %d", d, *res.DPRank)
	}
	if n := r.ActiveRequests(t); n != 0 {
		t.Fatalf("after the end: %v active requests, want 0", n)
	}
}

// TestPythonFallback: a model no worker serves goes to the fallback
// endpoint without a rank header.
func TestPythonFallback(t *testing.T) {
	r, eng := setup(t, 2)
	cmd, out, errb := gateway(t, r, eng, "no-such-model", "py-2")
	res := wait(t, cmd, out, errb)
	if res.Routed || res.DPRank != nil || res.Chunks != 2 {
		t.Fatalf("result %+v, want an unrouted dispatch with 2 chunks", res)
	}
	if d := eng.Dispatches(); len(d) != 1 || d[0].Rank != "" {
		t.Fatalf("engine got %+v, want one dispatch without a rank header", d)
	}
}
