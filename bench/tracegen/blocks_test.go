package tracegen

import (
	"slices"
	"testing"
)

func TestBlockIDs(t *testing.T) {
	b := newBlocker(4)
	sysA, sysB, user, more := b.segment(6), b.segment(6), b.segment(3), b.segment(5)
	ids := func(segs ...segment) []uint64 {
		var p prompt
		p.add(segs...)
		return b.ids(&p)
	}
	a := ids(sysA)         // 6 tokens: one full block, one partial of 2
	a2 := ids(sysA)        // the same prompt again
	ab := ids(sysA, user)  // 9 tokens: full, full (2 of A + 2 of user), partial 1
	ab2 := ids(sysA, more) // diverges inside block 1
	c := ids(sysB)
	if len(a) != 2 || len(ab) != 3 || len(ab2) != 3 {
		t.Fatalf("lengths %v %v %v", a, ab, ab2)
	}
	if !slices.Equal(a, a2) {
		t.Errorf("same prompt, different ids: %v %v", a, a2)
	}
	if ab[0] != a[0] || ab2[0] != a[0] {
		t.Errorf("shared first block got different ids: %v %v %v", a, ab, ab2)
	}
	if ab[1] == a[1] {
		t.Errorf("the partial block of A and the full block of A+user share id %d", a[1])
	}
	if ab[1] == ab2[1] {
		t.Errorf("blocks with different content share id %d", ab[1])
	}
	if c[0] == a[0] {
		t.Error("different system prompts share block 0")
	}
	// Same content after a different parent is a different block.
	x, y := b.segment(4), b.segment(4)
	if xy, yx := ids(x, y), ids(y, y); xy[1] == yx[1] {
		t.Error("equal block after different prefixes shares an id")
	}
	// A growing prompt computes the same ids incrementally as from scratch.
	var p prompt
	var segs []segment
	for i := range 20 {
		s := b.segment(1 + (i*7)%11)
		p.add(s)
		segs = append(segs, s)
		if inc, fresh := b.ids(&p), ids(segs...); !slices.Equal(inc, fresh) {
			t.Fatalf("step %d: incremental %v, fresh %v", i, inc, fresh)
		}
	}
}
