package fleet

import (
	"errors"
	"strings"
	"testing"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// TestValidateEndpoints: registration accepts every endpoint form ingest
// does (a concrete host is dialled, a wildcard host or '@' bound, '>'
// dialled, ipc), for rank 0 and the last rank, and refuses the rest naming
// the field, before ingest starts.
func TestValidateEndpoints(t *testing.T) {
	tests := []struct {
		kv, replay string
		dp         uint32
		want       string // "" or the error's field and a substring
	}{
		{"tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558", 4, ""},
		{"tcp://[fd00::5]:5557", "", 2, ""},
		{"tcp://engine-0.local:5557", "tcp://engine-0.local:5558", 1, ""},
		{"tcp://*:5557", "", 2, ""}, // the router binds every interface
		{"tcp://0.0.0.0:5557", "", 1, ""},
		{"tcp://[::]:5557", "", 1, ""},
		{">tcp://10.0.0.5:5557", ">tcp://10.0.0.5:5558", 1, ""},
		{"@tcp://10.0.0.1:5557", "", 1, ""},
		{"ipc:///tmp/kv", "ipc:///tmp/replay", 2, ""},
		{"tcp://127.0.0.1:5557", "tcp://*:5558", 1, ""}, // replay: dialled at loopback
		{"inproc://kv", "", 1, "worker.kv_events_endpoint|inproc"},
		{"udp://10.0.0.5:5557", "", 1, "worker.kv_events_endpoint|unsupported transport"},
		{"tcp://10.0.0.5:0", "", 1, "worker.kv_events_endpoint|port 0"},
		{"tcp://10.0.0.5:65535", "", 2, "worker.kv_events_endpoint|out of range"},
		{"tcp://*:65535", "", 2, "worker.kv_events_endpoint|out of range"},
		{"tcp://10.0.0.5", "", 1, "worker.kv_events_endpoint|missing port"},
		{"tcp://10.0.0.5:5557", "@tcp://10.0.0.5:5558", 1, "worker.replay_endpoint|binds its replay socket"},
		{"tcp://10.0.0.5:5557", "tcp://*:0", 1, "worker.replay_endpoint|port 0"},
		{"tcp://10.0.0.5:5557", "inproc://replay", 1, "worker.replay_endpoint|inproc"},
	}
	for _, tt := range tests {
		w := &kvrouterv1.Worker{WorkerId: "w", Model: "m", KvEventsEndpoint: tt.kv, ReplayEndpoint: tt.replay, DpSize: tt.dp}
		err := Validate(w)
		if tt.want == "" {
			if err != nil {
				t.Errorf("validate(kv %q, replay %q, dp %d) = %v", tt.kv, tt.replay, tt.dp, err)
			}
			continue
		}
		field, text, _ := strings.Cut(tt.want, "|")
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), text) {
			t.Errorf("validate(kv %q, replay %q, dp %d) = %v; want an ErrInvalid naming %s with %q", tt.kv, tt.replay, tt.dp, err, field, text)
		}
	}
}

// TestValidateRankEndpoints: rank_endpoints, when set, gives one serving
// address a rank, each one Endpoint would accept.
func TestValidateRankEndpoints(t *testing.T) {
	tests := []struct {
		eps  []string
		dp   uint32
		want string
	}{
		{nil, 2, ""},
		{[]string{"10.0.0.1:8000", "10.0.0.2:8000"}, 2, ""},
		{[]string{"http://10.0.0.1:8000"}, 0, ""},
		{[]string{"10.0.0.1:8000"}, 2, "worker.rank_endpoints has 1 entries for dp_size 2"},
		{[]string{"10.0.0.1:8000", "no port"}, 2, "worker.rank_endpoints[1]"},
	}
	for _, tt := range tests {
		err := Validate(&kvrouterv1.Worker{WorkerId: "w", Model: "m", DpSize: tt.dp, RankEndpoints: tt.eps})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.eps, err)
		case tt.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: %v, want ErrInvalid naming %q", tt.eps, err, tt.want)
		}
	}
}
