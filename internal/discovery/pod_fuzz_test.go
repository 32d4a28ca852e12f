package discovery

import (
	"errors"
	"net"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Whatever a pod's annotations say, PodWorker returns ErrAnnotation or,
// for a pod with an IP address, a worker the fleet accepts.
func FuzzPodWorker(f *testing.F) {
	f.Add("4", "9000", "6000", "none", "10.0.0.1", "m")
	f.Add("x", "", "", "", "fd00::1", "")
	f.Add("65536", "0", "65535", "70000", "1.2.3.4", "m")
	f.Fuzz(func(t *testing.T, dp, port, events, replay, ip, model string) {
		p := pod("p", ip, true, nil, map[string]string{AnnotationDPSize: dp, AnnotationPort: port,
			AnnotationKVEventsPort: events, AnnotationReplayPort: replay, AnnotationModel: model})
		d := DefaultDefaults()
		d.Model = "default"
		w, err := PodWorker(p, d, nil)
		if err != nil {
			if !errors.Is(err, ErrAnnotation) {
				t.Fatalf("error %v is not ErrAnnotation", err)
			}
			return
		}
		if err := fleet.Validate(w); err != nil && net.ParseIP(ip) != nil {
			t.Fatalf("worker %v of a pod at %q: %v", w, ip, err)
		}
	})
}
