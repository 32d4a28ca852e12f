package radix

import "testing"

func TestSpareWords(t *testing.T) {
	var p spareWords
	if a := p.get(10); len(a) != 10 || cap(a) != 10 {
		t.Fatalf("small get: len %d cap %d", len(a), cap(a))
	}
	a := p.get(100)
	if len(a) != 100 || cap(a) != 100 {
		t.Fatalf("get(100): len %d cap %d, want 100 100", len(a), cap(a))
	}
	p.put(a)
	p.put(make([]uint64, 10)) // too small to keep
	if p.words != 100 {
		t.Fatalf("words %d after putting 100 and 10", p.words)
	}
	if b := p.get(200); cap(b) != 200 || p.words != 100 {
		t.Fatalf("get(200) took the 100-word array (cap %d) or changed the pool (%d)", cap(b), p.words)
	}
	if b := p.get(101); cap(b) != 101 || p.words != 100 {
		t.Fatalf("get(101) took the 100-word array (cap %d) or changed the pool (%d)", cap(b), p.words)
	}
	if b := p.get(65); &b[0] != &a[0] || len(b) != 65 || p.words != 0 {
		t.Fatalf("get(65) did not reuse the 100-word array (len %d, words %d)", len(b), p.words)
	}
	for range spareMaxWords/1024 + 1 {
		p.put(make([]uint64, 1024))
	}
	if p.words != spareMaxWords {
		t.Fatalf("pool holds %d words, bound %d", p.words, spareMaxWords)
	}
}
