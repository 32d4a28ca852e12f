package tokenizer

import (
	"errors"
	"fmt"
)

// addedTrie finds added tokens in text, leftmost-longest, as the Rust library's Aho-Corasick
// matcher does. Added tokens are split out before normalization and pre-tokenization.
type addedTrie struct {
	nodes []trieNode
	n     int
	first [256]bool // bytes that start an added token: the scan skips the rest at once
}

type trieNode struct {
	next map[byte]int32
	id   uint32
	leaf bool
}

func parseAdded(toks []addedJSON, nfc bool) (*addedTrie, error) {
	t := &addedTrie{nodes: []trieNode{{}}}
	for _, a := range toks {
		switch {
		case a.Content == "":
			return nil, fmt.Errorf("id %d has empty content", a.ID)
		case a.SingleWord || a.LStrip || a.RStrip:
			return nil, fmt.Errorf("%q with single_word, lstrip or rstrip", a.Content)
		case a.Normalized && nfc:
			// Such a token is matched on normalized text; not implemented.
			return nil, fmt.Errorf("%q with normalized true under a normalizer", a.Content)
		}
		t.insert(a.Content, a.ID)
	}
	if len(toks) > 0 && t.n == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

func (t *addedTrie) insert(s string, id uint32) {
	cur := int32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := t.nodes[cur].next[s[i]]
		if !ok {
			if t.nodes[cur].next == nil {
				t.nodes[cur].next = make(map[byte]int32)
			}
			nx = int32(len(t.nodes))
			t.nodes[cur].next[s[i]] = nx
			t.nodes = append(t.nodes, trieNode{})
		}
		cur = nx
	}
	if !t.nodes[cur].leaf {
		t.n++
	}
	t.first[s[0]] = true
	t.nodes[cur].leaf, t.nodes[cur].id = true, id
}

// longest returns the length and id of the longest added token that starts s, or 0.
func (t *addedTrie) longest(s string) (int, uint32) {
	cur, best, bestID := int32(0), 0, uint32(0)
	for i := 0; i < len(s); i++ {
		nx, ok := t.nodes[cur].next[s[i]]
		if !ok {
			break
		}
		cur = nx
		if t.nodes[cur].leaf {
			best, bestID = i+1, t.nodes[cur].id
		}
	}
	return best, bestID
}

// split calls text for each stretch without added tokens and token for each added token, in
// order.
func (t *addedTrie) split(s string, text func(string), token func(uint32)) {
	start := 0
	for i := 0; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		n, id := t.longest(s[i:])
		if n == 0 {
			continue
		}
		if i > start {
			text(s[start:i])
		}
		token(id)
		start = i + n
		i = start - 1
	}
	if start < len(s) {
		text(s[start:])
	}
}
