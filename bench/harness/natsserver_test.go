package harness

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestNATSTap(t *testing.T) {
	n, err := StartNATS(0)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tap, err := n.Tap("pfx")
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	before, err := n.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"pfx.load.a", "pfx.load.b", "pfx.state", "other"} {
		if err := nc.Publish(subj, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for tap.Flows()["other"].Msgs < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("tap saw %v", tap.Flows())
		}
		time.Sleep(5 * time.Millisecond)
	}
	f := tap.Flows()
	if f["load"].Msgs != 2 || f["load"].Bytes != 2*(10+100) || f["state"].Msgs != 1 {
		t.Fatalf("flows %v, want 2 load messages of 110 bytes and 1 state", f)
	}
	// The server adds a read's messages to its totals after it has parsed
	// the whole read, and by then it may already have delivered them to the
	// tap and answered the Flush: the totals are waited for, not read once.
	var d, own NATSTraffic
	deadline = time.Now().Add(30 * time.Second)
	for {
		after, err := n.Traffic()
		if err != nil {
			t.Fatal(err)
		}
		if own, err = tap.Own(); err != nil {
			t.Fatal(err)
		}
		d = after.Sub(before)
		if d.InMsgs >= 4 && d.InBytes >= 400 && own.OutMsgs >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d.InMsgs < 4 || d.InBytes < 400 || own.OutMsgs != 4 || own.OutBytes < 400 {
		t.Fatalf("server counted %+v, tap received %+v: want 4 messages of 100 bytes in, and out to the tap", d, own)
	}
}
