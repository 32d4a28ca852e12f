package ingest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Endpoint is a parsed ZeroMQ endpoint, seen from the router.
type Endpoint struct {
	// Transport is "tcp", "ipc" or "inproc".
	Transport string
	// Address is host:port for tcp (an empty host: every interface), a path
	// for ipc, a name for inproc.
	Address string
	// Bind is true when the engine connects and the router must bind.
	Bind bool

	// wildcard: a tcp endpoint the router binds because its host is a
	// wildcard (no '@'), as vLLM's default tcp://*:5557 is written.
	wildcard bool
}

// String returns the endpoint in ZeroMQ form, prefixed with '@' when the
// router binds; every interface is written '*'.
func (e Endpoint) String() string {
	addr := e.Address
	if e.Transport == "tcp" && strings.HasPrefix(addr, ":") {
		addr = "*" + addr
	}
	s := e.Transport + "://" + addr
	if e.Bind {
		return "@" + s
	}
	return s
}

// bindHint explains, after a failed bind, why the router bound: a wildcard
// host means the engines connect to the router, which is not how vLLM and
// SGLang publish by default.
func (e Endpoint) bindHint() string {
	if !e.wildcard {
		return ""
	}
	return " (a wildcard host makes the router bind and wait for engines that connect to it;" +
		" to subscribe to an engine that binds this port itself, as vLLM's default tcp://*:5557 does," +
		" register the engine's address, e.g. tcp://10.0.0.5:5557 or tcp://127.0.0.1:5557)"
}

// network returns the Go network name for the endpoint.
func (e Endpoint) network() string {
	if e.Transport == "ipc" {
		return "unix"
	}
	return "tcp"
}

// ParseEndpoint parses an engine's KV event endpoint and decides who binds.
// For tcp the host decides:
//
//   - a concrete host (an IPv4 or IPv6 address, a hostname) is where the
//     engine's events are, bound by the engine as vLLM and SGLang do: the
//     router dials it. tcp://10.0.0.5:5557, tcp://[fd00::5]:5557,
//     tcp://engine-0:5557.
//   - a wildcard host ('*', an empty host, 0.0.0.0, ::, [::]) cannot be
//     dialled: the router binds it and waits for engines that connect to it.
//     vLLM's literal tcp://*:5557 makes the router bind port 5557 on every
//     interface (the engine must then be configured to connect).
//
// A czmq-style prefix decides instead: '@' binds (@tcp://10.0.0.1:5557 binds
// that address), '>' dials (a wildcard host is then dialled at loopback:
// >tcp://*:5557 dials 127.0.0.1:5557). An ipc:// endpoint is bound by the
// engine, so the router dials it unless it has '@'. inproc:// endpoints live
// inside the engine's process and are rejected.
func ParseEndpoint(s string) (Endpoint, error) {
	raw := s
	force := byte(0)
	if strings.HasPrefix(s, ">") || strings.HasPrefix(s, "@") {
		force = s[0]
		s = s[1:]
	}
	transport, addr, ok := strings.Cut(s, "://")
	if !ok || addr == "" {
		return Endpoint{}, fmt.Errorf("endpoint %q: want transport://address", raw)
	}
	e := Endpoint{Transport: transport, Address: addr}
	switch transport {
	case "tcp":
		host, p, err := splitTCP(addr)
		if err != nil {
			return Endpoint{}, fmt.Errorf("endpoint %q: %w", raw, err)
		}
		wildcard := isWildcard(host)
		switch force {
		case '>':
			e.Bind = false
		case '@':
			e.Bind = true
		default:
			e.Bind = wildcard
			e.wildcard = wildcard
		}
		if !e.Bind {
			if p == 0 {
				return Endpoint{}, fmt.Errorf("endpoint %q: cannot dial port 0 (to bind an ephemeral port, write @tcp://host:0)", raw)
			}
			if wildcard {
				if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
					host = "::1"
				} else {
					host = "127.0.0.1"
				}
			}
		} else if host == "*" {
			host = ""
		}
		e.Address = net.JoinHostPort(host, strconv.Itoa(p))
	case "ipc":
		// Bound by the engine unless '@' says otherwise.
		e.Bind = force == '@'
	case "inproc":
		return Endpoint{}, fmt.Errorf("endpoint %q: inproc endpoints live inside the engine's process and cannot be reached from the router", raw)
	default:
		return Endpoint{}, fmt.Errorf("endpoint %q: unsupported transport %q", raw, transport)
	}
	return e, nil
}

// splitTCP splits a tcp endpoint's host:port as libzmq does: the port is
// after the last ':', the host may be bracketed ([::1]) or, when it is an
// IPv6 address, not (::1).
func splitTCP(addr string) (host string, port int, err error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("missing port in address %q", addr)
	}
	host, ps := addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") || strings.HasSuffix(host, "]") {
		h, ok := strings.CutPrefix(host, "[")
		h, ok2 := strings.CutSuffix(h, "]")
		if !ok || !ok2 || !strings.Contains(h, ":") || net.ParseIP(h) == nil {
			return "", 0, fmt.Errorf("bad host %q", host)
		}
		host = h
	} else if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("bad host %q", host)
	}
	if strings.ContainsAny(host, "[]/ ") {
		return "", 0, fmt.Errorf("bad host %q", host)
	}
	if ps == "" || strings.Trim(ps, "0123456789") != "" {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return host, p, nil
}

// isWildcard reports whether host names every interface: '*', empty, or an
// unspecified IP (0.0.0.0, ::).
func isWildcard(host string) bool {
	if host == "*" || host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// RankEndpoint returns the endpoint of data-parallel rank r given the rank 0
// endpoint, as engines derive it: tcp adds r to the port, ipc and inproc
// append "_dp<r>" to the name. Rank 0 is the base endpoint unchanged. Any '>'
// or '@' prefix is kept.
func RankEndpoint(base string, rank int) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("endpoint %q: negative rank %d", base, rank)
	}
	if rank == 0 {
		return base, nil
	}
	prefix := ""
	s := base
	if strings.HasPrefix(s, ">") || strings.HasPrefix(s, "@") {
		prefix, s = s[:1], s[1:]
	}
	transport, addr, ok := strings.Cut(s, "://")
	if !ok || addr == "" {
		return "", fmt.Errorf("endpoint %q: want transport://address", base)
	}
	switch transport {
	case "tcp":
		i := strings.LastIndexByte(addr, ':')
		if i < 0 {
			return "", fmt.Errorf("endpoint %q: no port", base)
		}
		p, err := strconv.Atoi(addr[i+1:])
		if err != nil || p < 0 {
			return "", fmt.Errorf("endpoint %q: bad port %q", base, addr[i+1:])
		}
		if p+rank > 65535 {
			return "", fmt.Errorf("endpoint %q: rank %d port %d out of range", base, rank, p+rank)
		}
		return prefix + transport + "://" + addr[:i+1] + strconv.Itoa(p+rank), nil
	case "ipc", "inproc":
		return prefix + s + "_dp" + strconv.Itoa(rank), nil
	default:
		return "", fmt.Errorf("endpoint %q: unsupported transport %q", base, transport)
	}
}

// replayEndpoint parses a replay (ROUTER) endpoint: the engine always binds it,
// so the router always dials it (a wildcard host, as the engine's own
// configuration writes it, at loopback).
func replayEndpoint(s string) (Endpoint, error) {
	if strings.HasPrefix(s, "@") {
		return Endpoint{}, fmt.Errorf("replay endpoint %q: the engine binds its replay socket; the router cannot", s)
	}
	if !strings.HasPrefix(s, ">") {
		s = ">" + s
	}
	return ParseEndpoint(s)
}
