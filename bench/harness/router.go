package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// RouterConfig describes a router subprocess to start.
type RouterConfig struct {
	// Bin is the router binary (default bin/kvrouter).
	Bin string
	// GRPCAddr and HTTPAddr are the listen addresses; empty picks free
	// loopback ports.
	GRPCAddr, HTTPAddr string
	// BlockSize is the router's block size (default 16).
	BlockSize int
	// Args are extra flags, e.g. --predict=false. Without --state-dir the
	// router gets a fresh temporary one, removed by Stop: a run never
	// restores another run's registry or index.
	Args []string
	// Log receives the router's stdout and stderr; nil discards.
	Log io.Writer
	// StartTimeout bounds StartRouter's wait for the router to answer (default 20 s).
	StartTimeout time.Duration
	// EPP serves the endpoint picker (--epp-addr) on EPPAddr, a free
	// loopback port when empty.
	EPP     bool
	EPPAddr string
}

// Router is a running router subprocess with clients connected to it.
type Router struct {
	cmd      *exec.Cmd
	tmpState string // a state dir LaunchRouter made; Stop removes it
	exited   chan struct{}
	waitErr  error
	health   healthpb.HealthClient
	lastCPU  time.Duration // the CPU time last read by Replicas (kept past a kill)
	// Started is when the process was started.
	Started  time.Time
	GRPCAddr string
	HTTPAddr string
	EPPAddr  string // "" unless RouterConfig.EPP
	Conn     *grpc.ClientConn
	Router   kvrouterv1.RouterClient
	Registry kvrouterv1.RegistryClient
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// handOver returns the router's flag value for *addr: *addr itself, or,
// when it is empty, "fd:N" for a loopback socket bound here and appended
// to files (the child's descriptor 3 onwards), *addr set to its address.
func handOver(addr *string, files *[]*os.File) (string, error) {
	if *addr != "" {
		return *addr, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("router listener: %w", err)
	}
	defer l.Close() // the file is a duplicate
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return "", fmt.Errorf("router listener: %w", err)
	}
	*files = append(*files, f)
	*addr = l.Addr().String()
	return fmt.Sprintf("fd:%d", 2+len(*files)), nil
}

// StartRouter starts the router and waits until its gRPC API answers.
func StartRouter(ctx context.Context, cfg RouterConfig) (*Router, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	r, err := LaunchRouter(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.WaitAnswering(ctx, cfg.StartTimeout); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// exitedEarly reports whether the process has exited (before any Stop).
func (r *Router) exitedEarly() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// tailWriter passes writes on and keeps the last tailBytes of them.
type tailWriter struct {
	w    io.Writer
	mu   sync.Mutex
	tail []byte
}

const tailBytes = 4096

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.tail = append(t.tail, p...)
	if n := len(t.tail); n > tailBytes {
		t.tail = append(t.tail[:0], t.tail[n-tailBytes:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

func (t *tailWriter) contains(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Contains(string(t.tail), s)
}

// LaunchRouter starts the router process and connects a client without
// waiting for it to answer: a caller timing its start polls Health or
// WaitAnswering itself. For an empty address in cfg LaunchRouter binds a
// loopback port itself and hands the socket to the router (--grpc-addr
// fd:N), so no other socket can take the port in between; Router's
// addresses say which. Pass them again to restart a router where it was.
func LaunchRouter(cfg RouterConfig) (*Router, error) {
	if cfg.Bin == "" {
		cfg.Bin = "bin/kvrouter"
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	if _, err := os.Stat(cfg.Bin); err != nil {
		return nil, fmt.Errorf("router binary: %w (run `make build` or pass the path)", err)
	}
	var inherited []*os.File
	defer func() {
		for _, f := range inherited {
			f.Close() // the router holds its own copy
		}
	}()
	grpcArg, err := handOver(&cfg.GRPCAddr, &inherited)
	if err != nil {
		return nil, err
	}
	httpArg, err := handOver(&cfg.HTTPAddr, &inherited)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--grpc-addr", grpcArg,
		"--http-addr", httpArg,
		"--block-size", strconv.Itoa(cfg.BlockSize),
	}, cfg.Args...)
	if cfg.EPP {
		eppArg, err := handOver(&cfg.EPPAddr, &inherited)
		if err != nil {
			return nil, err
		}
		args = append(args, "--epp-addr", eppArg)
	}
	var tmpState string
	if !slices.ContainsFunc(cfg.Args, func(a string) bool { return a == "--state-dir" || strings.HasPrefix(a, "--state-dir=") }) {
		if tmpState, err = os.MkdirTemp("", "kvrouter-state-"); err != nil {
			return nil, err
		}
		args = append(args, "--state-dir", tmpState)
	}
	cmd := exec.Command(cfg.Bin, args...)
	cmd.ExtraFiles = inherited
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	cmd.Stdout, cmd.Stderr = cfg.Log, cfg.Log
	detach(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start router %s: %w", cfg.Bin, err)
	}
	r := &Router{cmd: cmd, exited: make(chan struct{}), Started: time.Now(), tmpState: tmpState,
		GRPCAddr: DialAddr(cfg.GRPCAddr), HTTPAddr: DialAddr(cfg.HTTPAddr)}
	if cfg.EPP {
		r.EPPAddr = DialAddr(cfg.EPPAddr)
	}
	go func() { r.waitErr = cmd.Wait(); close(r.exited) }()
	// A short reconnect backoff: the default (1 s after the first refused
	// connection) would hide how soon a starting router answers.
	r.Conn, err = grpc.NewClient(r.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("dial router: %w", err)
	}
	r.Router = kvrouterv1.NewRouterClient(r.Conn)
	r.Registry = kvrouterv1.NewRegistryClient(r.Conn)
	r.health = healthpb.NewHealthClient(r.Conn)
	return r, nil
}

// WaitAnswering polls ListWorkers until it answers, the router exits, ctx
// ends or timeout passes.
func (r *Router) WaitAnswering(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := r.Registry.ListWorkers(cctx, &kvrouterv1.ListWorkersRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-r.exited:
			return fmt.Errorf("router exited during start: %v", r.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("router did not answer on %s within %v: %w", r.GRPCAddr, timeout, err)
		}
	}
}

// Health asks the router's grpc.health.v1 service for the overall status
// (service ""), with a one-second timeout.
func (r *Router) Health(ctx context.Context) (healthpb.HealthCheckResponse_ServingStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := r.health.Check(cctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}

// PID is the router's process id.
func (r *Router) PID() int { return r.cmd.Process.Pid }

// ExitErr is how the process ended; valid once Exited is closed.
func (r *Router) ExitErr() error { return r.waitErr }

// Kill sends SIGKILL (a crash: no drain, no final snapshot) and waits for the
// process to end.
func (r *Router) Kill() error {
	if r.Conn != nil {
		r.Conn.Close()
	}
	select {
	case <-r.exited:
		return fmt.Errorf("router had already exited: %v", r.waitErr)
	default:
	}
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill router: %w", err)
	}
	<-r.exited
	return nil
}

// DialAddr turns a listen address like ":50051" into a dialable one.
func DialAddr(a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1:" + port
	}
	return a
}

// Exited is closed when the router process ends.
func (r *Router) Exited() <-chan struct{} { return r.exited }

// Healthy reports whether /healthz answers 200.
func (r *Router) Healthy() error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + r.HTTPAddr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// Stop sends SIGTERM, waits up to 15 s, then kills the process.
func (r *Router) Stop() error {
	err := r.stop()
	if r.tmpState != "" {
		os.RemoveAll(r.tmpState)
	}
	return err
}

func (r *Router) stop() error {
	if r.Conn != nil {
		r.Conn.Close()
	}
	select {
	case <-r.exited:
		return nil
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return errors.New("router did not stop on SIGTERM; killed")
	}
	var ee *exec.ExitError
	if r.waitErr != nil && !errors.As(r.waitErr, &ee) {
		return r.waitErr
	}
	return nil
}

// RouterHasFlag reports whether the router binary's -h lists --name, for a
// harness that must run routers built before the flag existed.
func RouterHasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}

// MetricSum sums every series of metric name on the router's /metrics.
func (r *Router) MetricSum(name string) (float64, error) {
	var sum float64
	err := r.scrapeMetrics(func(line string) error {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			return nil
		}
		v, err := sampleValue(line)
		sum += v
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return sum, nil
}

// MetricSeries is the value of each series (a metric name with its labels,
// as /metrics prints them), 0 for one not printed.
func (r *Router) MetricSeries(series ...string) ([]float64, error) {
	out := make([]float64, len(series))
	err := r.scrapeMetrics(func(line string) error {
		for i, s := range series {
			if strings.HasPrefix(line, s+" ") {
				v, err := sampleValue(line)
				out[i] = v
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(series, ", "), err)
	}
	return out, nil
}

// sampleValue is a /metrics line's value.
func sampleValue(line string) (float64, error) {
	f := strings.Fields(line)
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", line, err)
	}
	return v, nil
}

// scrapeMetrics passes each line of r's /metrics to each.
func (r *Router) scrapeMetrics(each func(line string) error) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + DialAddr(r.HTTPAddr) + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := each(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}
