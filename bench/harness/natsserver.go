package harness

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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

// NATSFlow counts messages and bytes (subject, reply, headers and payload as
// received) published on one kind of subject.
type NATSFlow struct {
	Msgs  int64 `json:"msgs"`
	Bytes int64 `json:"bytes"`
}

// NATSTap subscribes to every subject of the account and counts what was
// published, by kind of subject, so a run can tell the load sync from the
// registry, the snapshots and JetStream's own requests. Its deliveries are
// traffic it adds; Own reads them from the server so they can be subtracted.
type NATSTap struct {
	srv    *natsserver.Server
	nc     *nats.Conn
	prefix string
	mu     sync.Mutex
	kinds  map[string]*NATSFlow
}

// Tap connects a counting subscriber; prefix is the routers' --nats-prefix.
func (n *NATS) Tap(prefix string) (*NATSTap, error) {
	nc, err := nats.Connect(n.URL(), nats.Name("kvbench tap"))
	if err != nil {
		return nil, fmt.Errorf("nats tap: %w", err)
	}
	t := &NATSTap{srv: n.srv, nc: nc, prefix: prefix, kinds: map[string]*NATSFlow{}}
	sub, err := nc.Subscribe(">", t.count)
	if err == nil {
		err = sub.SetPendingLimits(-1, -1) // never a slow consumer: it must see everything
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats tap: subscribe: %w", err)
	}
	return t, nil
}

func (t *NATSTap) count(m *nats.Msg) {
	size := int64(len(m.Subject) + len(m.Reply) + len(m.Data))
	for k, vs := range m.Header {
		for _, v := range vs {
			size += int64(len(k) + len(v) + 4)
		}
	}
	k := t.kind(m.Subject)
	t.mu.Lock()
	f := t.kinds[k]
	if f == nil {
		f = &NATSFlow{}
		t.kinds[k] = f
	}
	f.Msgs++
	f.Bytes += size
	t.mu.Unlock()
}

// kind names a subject's role.
func (t *NATSTap) kind(subject string) string {
	for _, c := range []struct{ prefix, kind string }{
		{t.prefix + ".load.", "load"},
		{t.prefix + ".state", "state"},
		{"$KV.", "registry"},
		{"$O.", "snapshots"},
		{"$JS.API.", "jetstream-api"},
		{"$JS.", "jetstream-other"},
		{"_INBOX.", "replies"},
	} {
		if strings.HasPrefix(subject, c.prefix) {
			return c.kind
		}
	}
	return "other"
}

// Flows returns the counts so far, by kind.
func (t *NATSTap) Flows() map[string]NATSFlow {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]NATSFlow, len(t.kinds))
	for k, f := range t.kinds {
		out[k] = *f
	}
	return out
}

// Own is the traffic the server sent the tap (to subtract from Traffic).
func (t *NATSTap) Own() (NATSTraffic, error) {
	if err := t.nc.Flush(); err != nil {
		return NATSTraffic{}, fmt.Errorf("nats tap: flush: %w", err)
	}
	cid, err := t.nc.GetClientID()
	if err != nil {
		return NATSTraffic{}, fmt.Errorf("nats tap: %w", err)
	}
	cz, err := t.srv.Connz(&natsserver.ConnzOptions{CID: cid})
	if err != nil {
		return NATSTraffic{}, fmt.Errorf("nats tap: connz: %w", err)
	}
	if len(cz.Conns) != 1 {
		return NATSTraffic{}, fmt.Errorf("nats tap: connz: %d connections with cid %d", len(cz.Conns), cid)
	}
	c := cz.Conns[0]
	return NATSTraffic{InMsgs: c.InMsgs, OutMsgs: c.OutMsgs, InBytes: c.InBytes, OutBytes: c.OutBytes}, nil
}

// Close disconnects the tap.
func (t *NATSTap) Close() { t.nc.Close() }
