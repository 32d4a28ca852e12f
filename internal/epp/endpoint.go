package epp

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// hostPort is a worker's serving endpoint as IP:PORT: a URL's host, or the
// endpoint itself.
func hostPort(ep string) string {
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			return u.Host
		}
	}
	return ep
}

// rankEndpoint is the serving endpoint of rank r of w: its rank_endpoints
// entry when it lists them, else its endpoint's port plus r (vLLM's data
// parallel ports, and GIE InferencePool targetPorts). It is "" when w has no
// endpoint or the port does not parse.
func rankEndpoint(w *kvrouterv1.Worker, r uint32) string {
	if eps := w.GetRankEndpoints(); int(r) < len(eps) {
		return hostPort(eps[r])
	}
	ep := hostPort(w.GetEndpoint())
	if r == 0 || ep == "" {
		return ep
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return ""
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p+uint64(r) > 65535 {
		return ""
	}
	return net.JoinHostPort(host, strconv.FormatUint(p+uint64(r), 10))
}

// subset is the endpoints a gateway allows for one request (GIE's subset
// hint): entries with a port name one endpoint, entries without one every
// port of that address. A nil subset allows every endpoint.
type subset struct {
	exact map[string]bool
	hosts map[string]bool
}

// parseSubset reads a subset hint's entries, each possibly a
// comma-separated list, ignoring empty ones. ok is false when no entry is
// left.
func parseSubset(entries []string) (s *subset, ok bool) {
	s = &subset{exact: map[string]bool{}, hosts: map[string]bool{}}
	for _, e := range entries {
		for _, part := range strings.Split(e, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(part); err == nil {
				s.exact[part] = true
			} else {
				s.hosts[strings.Trim(part, "[]")] = true
			}
		}
	}
	return s, len(s.exact)+len(s.hosts) > 0
}

// allows reports whether ep (IP:PORT) is in s.
func (s *subset) allows(ep string) bool {
	if s == nil {
		return true
	}
	if s.exact[ep] {
		return true
	}
	host, _, err := net.SplitHostPort(ep)
	return err == nil && s.hosts[host]
}
