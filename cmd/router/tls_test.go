package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// testCA is a throwaway certificate authority whose certificates are
// written to a test's temporary directory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	dir  string
}

var serial int64

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), dir: dir}
	writeFile(t, filepath.Join(dir, name+".pem"), ca.pem)
	return ca
}

// issue signs a leaf certificate for name (a server's for 127.0.0.1 and
// localhost, or a client's) and writes name.pem and name-key.pem, whose
// paths it returns with the key pair.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certPath, keyPath string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	certPath, keyPath = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writeFile(t, certPath, certPEM)
	writeFile(t, keyPath, keyPEM)
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath, pair
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// dialTLS dials addr trusting ca, presenting client when it is not nil.
func dialTLS(t *testing.T, addr string, ca *testCA, client *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		tc.Certificates = []tls.Certificate{*client}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// waitServingOn is waitServing over cc (a TLS connection).
func waitServingOn(t *testing.T, r *router, cc *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := w.Recv()
		if err != nil {
			t.Fatalf("router never reported SERVING: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

func healthCode(t *testing.T, cc *grpc.ClientConn) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return status.Code(err)
}

// stopRouter sends SIGTERM and waits for the exit, after which r.stderrTail
// may be read.
func stopRouter(t *testing.T, r *router) string {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("router did not exit within 20s of SIGTERM")
	}
	return r.stderrTail.String()
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A TLS listener refuses plaintext, serves TLS clients that trust its CA,
// and (auth off) warns that the Registry is open. --pprof turns pprof on.
func TestBinaryTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	cert, key, _ := ca.issue(t, "server", true)
	r := launchRouter(t, "--tls-cert", cert, "--tls-key", key, "--pprof")
	cc := dialTLS(t, r.grpcAddr, ca, nil)
	waitServingOn(t, r, cc)

	if code := healthCode(t, dial(t, r.grpcAddr)); code == codes.OK {
		t.Error("a plaintext client was served by the TLS listener")
	}
	other := newTestCA(t, dir, "other-ca")
	if code := healthCode(t, dialTLS(t, r.grpcAddr, other, nil)); code == codes.OK {
		t.Error("a client trusting another CA accepted the server's certificate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvrouterv1.NewRegistryClient(cc).ListWorkers(ctx, &kvrouterv1.ListWorkersRequest{}); err != nil {
		t.Fatalf("ListWorkers over TLS, auth off: %v", err)
	}
	if got := httpStatus(t, "http://"+r.httpAddr+"/debug/pprof/"); got != http.StatusOK {
		t.Errorf("/debug/pprof/ with --pprof = %d; want 200", got)
	}
	if logs := stopRouter(t, r); !strings.Contains(logs, "anyone who can reach the gRPC address can call kvrouter.v1.Registry") {
		t.Errorf("no warning that the Registry is open:\n%s", logs)
	}
}

// With --tls-client-ca a client must present a certificate that CA signed.
func TestBinaryMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	cert, key, _ := ca.issue(t, "server", true)
	_, _, client := ca.issue(t, "gateway", false)
	rogueCA := newTestCA(t, dir, "rogue-ca")
	_, _, rogue := rogueCA.issue(t, "rogue", false)

	r := launchRouter(t, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", filepath.Join(dir, "ca.pem"))
	cc := dialTLS(t, r.grpcAddr, ca, &client)
	waitServingOn(t, r, cc)
	if code := healthCode(t, cc); code != codes.OK {
		t.Fatalf("client with a CA-signed certificate: %v", code)
	}
	if code := healthCode(t, dialTLS(t, r.grpcAddr, ca, nil)); code == codes.OK {
		t.Error("a client without a certificate was served")
	}
	if code := healthCode(t, dialTLS(t, r.grpcAddr, ca, &rogue)); code == codes.OK {
		t.Error("a client whose certificate another CA signed was served")
	}
	if code := healthCode(t, dial(t, r.grpcAddr)); code == codes.OK {
		t.Error("a plaintext client was served")
	}
	// pprof is off by default.
	if got := httpStatus(t, "http://"+r.httpAddr+"/debug/pprof/"); got != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof = %d; want 404", got)
	}
}

// Bearer tokens: a gateway's calls Router, an operator's calls Registry
// (and Router); health is open, reflection takes any valid token; failures
// are counted, and no token is logged.
func TestBinaryTokens(t *testing.T) {
	const gw, op = "gw-4f1c0a9e2b7d4c6f8a3e", "op-9d2e7b1a0c4f6e8d3b5a"
	dir := t.TempDir()
	gwFile, opFile := filepath.Join(dir, "gateways"), filepath.Join(dir, "operators")
	writeFile(t, gwFile, []byte("# gateways\n"+gw+"\n"))
	writeFile(t, opFile, []byte(op+"\n"))
	r := startRouter(t, "--router-tokens-file", gwFile, "--registry-tokens-file", opFile)
	cc := dial(t, r.grpcAddr)
	base, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	as := func(tok string) context.Context {
		if tok == "" {
			return base
		}
		return metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+tok)
	}
	router, registry := kvrouterv1.NewRouterClient(cc), kvrouterv1.NewRegistryClient(cc)
	w := &kvrouterv1.Worker{WorkerId: "w1", Model: "m", Endpoint: "10.0.0.1:8000", DpSize: 1}
	score := &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: "m", TokenIds: make([]uint32, 40)}}
	check := func(what string, err error, want codes.Code) {
		t.Helper()
		if status.Code(err) != want {
			t.Errorf("%s: %v; want %v", what, err, want)
		}
	}

	_, err := registry.RegisterWorker(as(""), &kvrouterv1.RegisterWorkerRequest{Worker: w})
	check("RegisterWorker without a token", err, codes.Unauthenticated)
	_, err = registry.RegisterWorker(as("not-a-configured-token"), &kvrouterv1.RegisterWorkerRequest{Worker: w})
	check("RegisterWorker with an unknown token", err, codes.Unauthenticated)
	_, err = registry.RegisterWorker(as(gw), &kvrouterv1.RegisterWorkerRequest{Worker: w})
	check("RegisterWorker with a gateway token", err, codes.PermissionDenied)
	_, err = registry.RegisterWorker(as(op), &kvrouterv1.RegisterWorkerRequest{Worker: w})
	check("RegisterWorker with an operator token", err, codes.OK)
	_, err = registry.ListWorkers(as(gw), &kvrouterv1.ListWorkersRequest{})
	check("ListWorkers with a gateway token", err, codes.PermissionDenied)

	_, err = router.Score(as(""), score)
	check("Score without a token", err, codes.Unauthenticated)
	_, err = router.Score(as(gw), score)
	check("Score with a gateway token", err, codes.OK)
	_, err = router.Score(as(op), score)
	check("Score with an operator token", err, codes.OK)

	_, err = healthpb.NewHealthClient(cc).Check(as(""), &healthpb.HealthCheckRequest{Service: "kvrouter.v1.Registry"})
	check("health without a token", err, codes.OK)

	reflect := func(tok string) error {
		// The stream ends here: left open, it would hold the SIGTERM drain
		// at the end for the whole --drain-timeout.
		ctx, cancel := context.WithCancel(as(tok))
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			return err
		}
		// A refused stream may already be closed when Send runs; Send then
		// reports io.EOF and the status is Recv's to tell.
		err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	check("reflection without a token", reflect(""), codes.Unauthenticated)
	check("reflection with a gateway token", reflect(gw), codes.OK)

	resp, err := http.Get("http://" + r.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`kvrouter_auth_failures_total{reason="missing",service="kvrouter.v1.Registry"} 1`,
		`kvrouter_auth_failures_total{reason="invalid",service="kvrouter.v1.Registry"} 1`,
		`kvrouter_auth_failures_total{reason="forbidden",service="kvrouter.v1.Registry"} 2`,
		`kvrouter_auth_failures_total{reason="missing",service="kvrouter.v1.Router"} 1`,
		`kvrouter_auth_failures_total{reason="missing",service="grpc.reflection.v1.ServerReflection"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := stopRouter(t, r)
	if strings.Contains(logs, gw) || strings.Contains(logs, op) {
		t.Errorf("a token was logged:\n%s", logs)
	}
	if !strings.Contains(logs, "tokens cross the network in the clear") {
		t.Errorf("no warning about tokens without TLS:\n%s", logs)
	}
}

// Bad TLS and token files stop the start with an error naming the file.
func TestBinaryAccessConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	cert, key, _ := ca.issue(t, "server", true)
	garbage := filepath.Join(dir, "garbage.pem")
	writeFile(t, garbage, []byte("not a certificate\n"))
	short := filepath.Join(dir, "short-tokens")
	writeFile(t, short, []byte("abc\n"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", missing, "--tls-key", key}, missing},
		{[]string{"--tls-cert", cert, "--tls-key", garbage}, garbage},
		{[]string{"--tls-cert", cert}, "tls_key"},
		{[]string{"--tls-client-ca", cert}, "tls_client_ca"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", garbage}, garbage},
		{[]string{"--router-tokens-file", short}, short},
		{[]string{"--registry-tokens-file", missing}, missing},
	} {
		args := append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", "none"}, tc.args...)
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: err=%v output=%s; want a failure naming %s", tc.args, err, out, tc.want)
		}
	}
}
