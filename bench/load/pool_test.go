package load

import "testing"

func TestDocPool(t *testing.T) {
	p := docPool{Docs: 10, Groups: 2, DocBlocks: 8, SharedBlocks: 2, BlockSize: 4}
	a, b, c := p.tokens(0, nil), p.tokens(2, nil), p.tokens(1, nil)
	if len(a) != 32 {
		t.Fatalf("len %d", len(a))
	}
	shared := 2 * 4
	for i := 0; i < shared; i++ {
		if a[i] != b[i] {
			t.Fatalf("same group differs in the shared prefix at %d", i)
		}
	}
	if a[0] == c[0] && a[1] == c[1] && a[2] == c[2] {
		t.Fatal("different groups share a prefix")
	}
	if a[shared] == b[shared] && a[shared+1] == b[shared+1] {
		t.Fatal("documents share blocks past the group prefix")
	}
}
