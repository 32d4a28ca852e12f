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
	// Address is host:port for tcp, a path for ipc, a name for inproc.
	Address string
	// Bind is true when the engine connects and the router must bind.
	Bind bool
}

// String returns the endpoint in ZeroMQ form, prefixed with '@' when the
// router binds.
func (e Endpoint) String() string {
	s := e.Transport + "://" + e.Address
	if e.Bind {
		return "@" + s
	}
	return s
}

// network returns the Go network name for the endpoint.
func (e Endpoint) network() string {
	if e.Transport == "ipc" {
		return "unix"
	}
	return "tcp"
}

// ParseEndpoint parses an engine's KV event endpoint and decides, as the
// engines do, who binds: an endpoint containing '*' or "::", or an ipc:// or
// inproc:// endpoint, is bound by the engine and the router connects;
// otherwise the engine connects and the router binds. A leading '>' (connect)
// or '@' (bind), as in czmq, overrides the rule, so ">tcp://10.0.0.5:5557"
// connects to a remote engine that binds on every interface.
//
// When the router connects to a wildcard host ("*", "0.0.0.0", "::"), it
// connects to loopback.
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
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return Endpoint{}, fmt.Errorf("endpoint %q: %w", raw, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return Endpoint{}, fmt.Errorf("endpoint %q: bad port %q", raw, port)
		}
		engineBinds := strings.Contains(s, "*") || strings.Contains(s, "::")
		switch force {
		case '>':
			e.Bind = false
		case '@':
			e.Bind = true
		default:
			e.Bind = !engineBinds
		}
		if !e.Bind {
			if p == 0 {
				return Endpoint{}, fmt.Errorf("endpoint %q: cannot connect to port 0", raw)
			}
			switch host {
			case "*", "0.0.0.0", "":
				host = "127.0.0.1"
			case "::":
				host = "::1"
			}
		} else if host == "*" {
			host = ""
		}
		e.Address = net.JoinHostPort(host, strconv.Itoa(p))
	case "ipc", "inproc":
		// Bound by the engine.
		if force == '@' {
			e.Bind = true
		}
		if transport == "inproc" {
			return Endpoint{}, fmt.Errorf("endpoint %q: inproc endpoints live inside the engine's process and cannot be reached from the router", raw)
		}
	default:
		return Endpoint{}, fmt.Errorf("endpoint %q: unsupported transport %q", raw, transport)
	}
	return e, nil
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
// so the router always connects.
func replayEndpoint(s string) (Endpoint, error) {
	if strings.HasPrefix(s, "@") {
		return Endpoint{}, fmt.Errorf("replay endpoint %q: the engine binds its replay socket; the router cannot", s)
	}
	if !strings.HasPrefix(s, ">") {
		s = ">" + s
	}
	return ParseEndpoint(s)
}
