package replay

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
	deadline := time.Now().Add(5 * time.Second)
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
	after, err := n.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	own, err := tap.Own()
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.InMsgs < 4 || d.InBytes < 400 || own.OutMsgs != 4 || own.OutBytes < 400 {
		t.Fatalf("server counted %+v, tap received %+v: want 4 messages of 100 bytes in, and out to the tap", d, own)
	}
}
