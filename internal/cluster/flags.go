package cluster

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Options is cluster mode's part of the router's configuration: the nats
// section and replica_id of the YAML file (inlined at its top level), and
// their flags. Cluster mode is on when NATS.URL is set.
type Options struct {
	NATS      NATSOptions `yaml:"nats"`
	ReplicaID string      `yaml:"replica_id"`
}

// NATSOptions is how a replica reaches NATS.
type NATSOptions struct {
	URL            string        `yaml:"url"`
	CredsFile      string        `yaml:"creds_file"`
	TLS            NATSTLS       `yaml:"tls"`
	Prefix         string        `yaml:"prefix"`
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// Replicas is the JetStream replica count of the bucket and object
	// store this replica creates if they are missing.
	Replicas int `yaml:"replicas"`
	// ShareLoad shares Route load, predictions and marks (off: only the
	// registry and snapshots are shared).
	ShareLoad bool `yaml:"share_load"`
	// Decide is who decides a Route: DecideLeader (one replica decides
	// for the cluster, the others forward to it; decide.go) or
	// DecideLocal (each replica decides its own). Without ShareLoad each
	// decides its own either way: the others would not learn the
	// decider's Routes.
	Decide string `yaml:"decide"`
	// DecideTimeout bounds the wait for the deciding replica's answer.
	DecideTimeout time.Duration `yaml:"decide_timeout"`
}

// Values of NATSOptions.Decide.
const (
	DecideLeader = "leader"
	DecideLocal  = "local"
)

// NATSTLS is the NATS connection's TLS: the CA to verify the server, and a
// client certificate for mTLS.
type NATSTLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// DefaultOptions: cluster mode off; when on, the default prefix, a 5 s
// connect timeout, one JetStream replica, load shared, one replica
// deciding for all (50 ms to answer), and the replica named after the host
// and process.
func DefaultOptions() Options {
	return Options{
		NATS: NATSOptions{Prefix: DefaultPrefix, ConnectTimeout: 5 * time.Second, Replicas: 1, ShareLoad: true,
			Decide: DecideLeader, DecideTimeout: 50 * time.Millisecond},
		ReplicaID: DefaultReplicaID(),
	}
}

var (
	replicaIDRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	notSubjectRE = regexp.MustCompile(`[^A-Za-z0-9_-]`)
)

// ValidReplicaID reports whether id can name a replica (a NATS subject
// token).
func ValidReplicaID(id string) bool { return replicaIDRE.MatchString(id) }

// DefaultReplicaID is the host name and process id, with what a NATS
// subject token cannot hold replaced.
func DefaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kvrouter"
	}
	return fmt.Sprintf("%s-%d", notSubjectRE.ReplaceAllString(host, "_"), os.Getpid())
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	n := &o.NATS
	fs.StringVar(&n.URL, "nats-url", n.URL, "NATS server URL(s), comma-separated; turns cluster mode on (replicas share registry, load and snapshots)")
	fs.StringVar(&n.CredsFile, "nats-creds", n.CredsFile, "NATS credentials file (user JWT and nkey seed)")
	fs.StringVar(&n.TLS.CA, "nats-tls-ca", n.TLS.CA, "PEM CA bundle to verify the NATS server with")
	fs.StringVar(&n.TLS.Cert, "nats-tls-cert", n.TLS.Cert, "PEM client certificate for NATS (mTLS; with --nats-tls-key)")
	fs.StringVar(&n.TLS.Key, "nats-tls-key", n.TLS.Key, "PEM private key of --nats-tls-cert")
	fs.StringVar(&n.Prefix, "nats-prefix", n.Prefix, "prefix of the NATS bucket, object store and subject names")
	fs.DurationVar(&n.ConnectTimeout, "nats-connect-timeout", n.ConnectTimeout, "how long start-up waits for NATS before failing")
	fs.IntVar(&n.Replicas, "nats-replicas", n.Replicas, "JetStream replicas of the registry bucket and snapshot store when this replica creates them")
	fs.BoolVar(&n.ShareLoad, "nats-share-load", n.ShareLoad, "share Route load, predictions and marks with the other replicas (false: registry and snapshots only)")
	fs.StringVar(&n.Decide, "nats-decide", n.Decide, "who decides a Route: leader (the longest-running replica decides for all, the others forward to it, as one router decides a burst) or local (each replica decides its own)")
	fs.DurationVar(&n.DecideTimeout, "nats-decide-timeout", n.DecideTimeout, "how long a replica waits for the deciding replica's answer before deciding a Route itself")
	fs.StringVar(&o.ReplicaID, "replica-id", o.ReplicaID, "this replica's name on NATS subjects (letters, digits, - and _)")
}

// Enabled reports whether o turns cluster mode on.
func (o *Options) Enabled() bool { return o.NATS.URL != "" }

// Validate names the key of a bad value; without a URL nothing is checked.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	switch n := o.NATS; {
	case !ValidReplicaID(o.ReplicaID):
		return fmt.Errorf("config: replica_id %q: want letters, digits, '-' and '_' (it is a NATS subject token)", o.ReplicaID)
	case !ValidReplicaID(n.Prefix):
		return fmt.Errorf("config: nats.prefix %q: want letters, digits, '-' and '_'", n.Prefix)
	case (n.TLS.Cert == "") != (n.TLS.Key == ""):
		return fmt.Errorf("config: nats.tls.cert and nats.tls.key go together (got cert %q, key %q)", n.TLS.Cert, n.TLS.Key)
	case n.ConnectTimeout <= 0:
		return fmt.Errorf("config: nats.connect_timeout %v must be positive", n.ConnectTimeout)
	case n.Replicas < 1 || n.Replicas > 5:
		return fmt.Errorf("config: nats.replicas %d must be within 1..5", n.Replicas)
	case n.Decide != DecideLeader && n.Decide != DecideLocal:
		return fmt.Errorf("config: nats.decide %q: want %q or %q", n.Decide, DecideLeader, DecideLocal)
	case n.DecideTimeout <= 0:
		return fmt.Errorf("config: nats.decide_timeout %v must be positive", n.DecideTimeout)
	}
	return nil
}

// Config is the Connect Config of o; the caller sets the rest (OnStatus,
// Logger, Registerer, MaxStateChanges).
func (o *Options) Config() Config {
	n := o.NATS
	return Config{
		URL: n.URL, CredsFile: n.CredsFile, TLSCA: n.TLS.CA, TLSCert: n.TLS.Cert, TLSKey: n.TLS.Key,
		Prefix: n.Prefix, ReplicaID: o.ReplicaID, Replicas: n.Replicas, ConnectTimeout: n.ConnectTimeout,
		DecideTimeout: n.DecideTimeout,
	}
}

// URLForLog drops credentials from a URL list for the log.
func URLForLog(u string) string {
	var out []string
	for _, p := range strings.Split(u, ",") {
		if i := strings.Index(p, "@"); i >= 0 {
			if j := strings.Index(p, "://"); j >= 0 && j < i {
				p = p[:j+3] + "***" + p[i:]
			}
		}
		out = append(out, p)
	}
	return strings.Join(out, ",")
}
