package replay

import (
	"fmt"
	"os"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATS is an embedded nats-server with JetStream on a temporary directory,
// listening on a random loopback port: what replicated routers share in a
// bench run. It is a real server (the one the router's own tests embed), so
// its traffic counters are what a deployment's NATS would see.
type NATS struct {
	srv *natsserver.Server
	dir string
}

// NATSTraffic is the server's message and byte counters (from Varz): In is
// what clients published to the server, Out what it delivered to clients.
type NATSTraffic struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
}

// Sub is t - u, counter by counter.
func (t NATSTraffic) Sub(u NATSTraffic) NATSTraffic {
	return NATSTraffic{InMsgs: t.InMsgs - u.InMsgs, OutMsgs: t.OutMsgs - u.OutMsgs,
		InBytes: t.InBytes - u.InBytes, OutBytes: t.OutBytes - u.OutBytes}
}

// StartNATS starts the server and waits until it accepts connections. Port 0
// picks a random free port.
func StartNATS(port int) (*NATS, error) {
	dir, err := os.MkdirTemp("", "kvbench-nats-")
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	opts := &natsserver.Options{
		ServerName: "kvbench",
		Host:       "127.0.0.1",
		Port:       port,
		HTTPPort:   0, // no monitoring listener: Varz is read in-process
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nats: new server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nats: server not ready within 10s")
	}
	return &NATS{srv: srv, dir: dir}, nil
}

// URL is the client URL, e.g. nats://127.0.0.1:41234.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// StoreDir is the JetStream storage directory.
func (n *NATS) StoreDir() string { return n.dir }

// Traffic reads the server's counters.
func (n *NATS) Traffic() (NATSTraffic, error) {
	v, err := n.srv.Varz(nil)
	if err != nil {
		return NATSTraffic{}, fmt.Errorf("nats varz: %w", err)
	}
	return NATSTraffic{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs, InBytes: v.InBytes, OutBytes: v.OutBytes}, nil
}

// Connections is the number of client connections now.
func (n *NATS) Connections() int { return n.srv.NumClients() }

// Close shuts the server down and removes its storage.
func (n *NATS) Close() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	os.RemoveAll(n.dir)
}
