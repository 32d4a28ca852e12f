package fleet

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/kv"
)

// Validate checks a registration's fields; each error wraps ErrInvalid and
// names the field.
func Validate(w *kvrouterv1.Worker) error {
	bad := func(format string, args ...any) error { return errorf(ErrInvalid, nil, format, args...) }
	switch {
	case w == nil:
		return bad("worker is missing")
	case strings.TrimSpace(w.WorkerId) == "":
		return bad("worker.worker_id is empty")
	case strings.TrimSpace(w.Model) == "":
		return bad("worker.model is empty")
	case w.DpSize > kv.MaxDPSize:
		return bad("worker.dp_size %d is over the limit of %d", w.DpSize, kv.MaxDPSize)
	}
	if w.Endpoint != "" {
		if err := validateServingEndpoint(w.Endpoint); err != nil {
			return bad("worker.endpoint %q: %v", w.Endpoint, err)
		}
	}
	if n := len(w.RankEndpoints); n > 0 {
		if n != int(max(w.DpSize, 1)) {
			return bad("worker.rank_endpoints has %d entries for dp_size %d (one a rank)", n, max(w.DpSize, 1))
		}
		for i, ep := range w.RankEndpoints {
			if err := validateServingEndpoint(ep); err != nil {
				return bad("worker.rank_endpoints[%d] %q: %v", i, ep, err)
			}
		}
	}
	if w.ReplayEndpoint != "" && w.KvEventsEndpoint == "" {
		return bad("worker.replay_endpoint is set without worker.kv_events_endpoint")
	}
	last := int(max(w.DpSize, 1)) - 1
	if w.KvEventsEndpoint != "" {
		if err := checkRankEndpoints(w.KvEventsEndpoint, last, false); err != nil {
			return bad("worker.kv_events_endpoint %q: %v", w.KvEventsEndpoint, err)
		}
	}
	if w.ReplayEndpoint != "" {
		if err := checkRankEndpoints(w.ReplayEndpoint, last, true); err != nil {
			return bad("worker.replay_endpoint %q: %v", w.ReplayEndpoint, err)
		}
	}
	return nil
}

// checkRankEndpoints checks that ranks 0..last of ep are endpoints ingest can
// use, so that an error names the right field before ingest starts. A replay
// endpoint is always dialled (the engine binds it).
func checkRankEndpoints(ep string, last int, replay bool) error {
	for _, r := range []int{0, last} {
		s, err := ingest.RankEndpoint(ep, r)
		if err != nil {
			return err
		}
		if replay {
			if strings.HasPrefix(s, "@") {
				return errors.New("the engine binds its replay socket; the router cannot")
			}
			s = ">" + strings.TrimPrefix(s, ">")
		}
		if _, err := ingest.ParseEndpoint(s); err != nil {
			return err
		}
	}
	return nil
}

// validateServingEndpoint accepts host:port or a URL with a host.
func validateServingEndpoint(ep string) error {
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		if u.Host == "" {
			return errors.New("URL has no host")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("want host:port or a URL: %w", err)
	}
	if host == "" || port == "" {
		return errors.New("want host:port or a URL")
	}
	return nil
}
