package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnsupported is returned (wrapped, naming the file and the construct) for a tokenizer.json
// construct this package does not implement exactly.
var ErrUnsupported = errors.New("unsupported tokenizer construct")

// maxFileBytes bounds what Load reads; the largest real tokenizer.json files are a few tens of MB.
const maxFileBytes = 256 << 20

type fileJSON struct {
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         modelJSON       `json:"model"`
}

type addedJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

type typed struct {
	Type string `json:"type"`
}

// Load reads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg []byte
	if _, err := os.Stat(cfgPath); err == nil {
		if cfg, err = readBounded(cfgPath); err != nil {
			return nil, err
		}
	}
	return Parse(path, data, cfgPath, cfg)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the limit of %d", path, st.Size(), maxFileBytes)
	}
	return os.ReadFile(path)
}

// Parse builds a Tokenizer from the bytes of tokenizer.json and of tokenizer_config.json (nil
// when absent); the names are used in errors.
func Parse(name string, data []byte, cfgName string, cfg []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", name, fmt.Sprintf(format, args...), ErrUnsupported)
	}
	t := &Tokenizer{name: name}
	var err error
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, unsupported("normalizer %v", err)
	}
	if t.split, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, unsupported("pre_tokenizer %v", err)
	}
	if t.model, err = parseModel(&f.Model); err != nil {
		return nil, unsupported("model %v", err)
	}
	if t.added, err = parseAdded(f.AddedTokens, t.nfc); err != nil {
		return nil, unsupported("added_tokens %v", err)
	}
	if t.prefix, t.suffix, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, unsupported("post_processor %v", err)
	}
	if cfg != nil {
		if err := t.applyConfig(cfgName, cfg); err != nil {
			return nil, err
		}
	}
	t.cache = newWordCache(defaultCacheEntries)
	t.segs = newSegmentCache(defaultSegmentBytes)
	return t, nil
}

func parseNormalizer(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var n typed
	if err := json.Unmarshal(raw, &n); err != nil {
		return false, err
	}
	if n.Type == "NFC" {
		return true, nil
	}
	return false, fmt.Errorf("type %q (only NFC or none)", n.Type)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

type splitJSON struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

// parsePreTokenizer accepts ByteLevel with its GPT-2 regex, or Sequence[Split(known pattern,
// Isolated), ByteLevel(use_regex false)], both without a prefix space.
func parsePreTokenizer(raw json.RawMessage) (splitter, error) {
	if isNull(raw) {
		return nil, errors.New("none (a byte-level BPE needs ByteLevel)")
	}
	var top struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	switch top.Type {
	case "ByteLevel":
		bl, err := parseByteLevel(raw)
		if err != nil {
			return nil, err
		}
		if bl.UseRegex != nil && !*bl.UseRegex {
			return nil, errors.New("ByteLevel with use_regex false and no Split before it")
		}
		return gpt2Splitter{}, nil
	case "Sequence":
		if len(top.PreTokenizers) != 2 {
			return nil, fmt.Errorf("Sequence of %d (only Split then ByteLevel)", len(top.PreTokenizers))
		}
		var sp splitJSON
		if err := json.Unmarshal(top.PreTokenizers[0], &sp); err != nil {
			return nil, err
		}
		if sp.Type != "Split" || sp.Pattern.Regex == nil || sp.Behavior != "Isolated" || sp.Invert {
			return nil, fmt.Errorf("Sequence[0] %s %s invert=%v (only Split with a Regex, Isolated)",
				sp.Type, sp.Behavior, sp.Invert)
		}
		s, ok := splitterFor(*sp.Pattern.Regex)
		if !ok {
			return nil, fmt.Errorf("Split pattern %q (only the GPT-2, Llama-3 and Qwen2 patterns)", *sp.Pattern.Regex)
		}
		bl, err := parseByteLevel(top.PreTokenizers[1])
		if err != nil {
			return nil, fmt.Errorf("Sequence[1]: %w", err)
		}
		if bl.UseRegex == nil || *bl.UseRegex {
			return nil, errors.New("Sequence[1] ByteLevel with use_regex true after a Split")
		}
		return s, nil
	}
	return nil, fmt.Errorf("type %q", top.Type)
}

func parseByteLevel(raw json.RawMessage) (byteLevelJSON, error) {
	var bl byteLevelJSON
	if err := json.Unmarshal(raw, &bl); err != nil {
		return bl, err
	}
	if bl.Type != "ByteLevel" {
		return bl, fmt.Errorf("type %q where ByteLevel was expected", bl.Type)
	}
	if bl.AddPrefixSpace {
		return bl, errors.New("ByteLevel with add_prefix_space true")
	}
	return bl, nil
}

func parseModel(mj *modelJSON) (*bpe, error) {
	switch {
	case mj.Type != "BPE":
		return nil, fmt.Errorf("type %q (only BPE)", mj.Type)
	case mj.Dropout != nil && *mj.Dropout != 0:
		return nil, errors.New("BPE dropout")
	case mj.ByteFallback:
		return nil, errors.New("BPE byte_fallback")
	case mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "":
		return nil, errors.New("BPE continuing_subword_prefix")
	case mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "":
		return nil, errors.New("BPE end_of_word_suffix")
	}
	inv := runeToByte()
	m := &bpe{
		vocab:        make(map[string]uint32, len(mj.Vocab)),
		merges:       make(map[uint64]merge, len(mj.Merges)),
		ignoreMerges: mj.IgnoreMerges,
	}
	for s, id := range mj.Vocab {
		b, ok := decodeByteLevel(s, inv)
		if !ok {
			return nil, fmt.Errorf("vocab entry %q outside the ByteLevel alphabet", s)
		}
		m.vocab[b] = id
		m.maxLen = max(m.maxLen, len(b))
	}
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("vocab has no token for byte %#02x", b)
		}
		m.bytes[b] = id
	}
	for rank, raw := range mj.Merges {
		l, r, err := parseMerge(raw)
		if err != nil {
			return nil, fmt.Errorf("merges[%d]: %w", rank, err)
		}
		lb, ok1 := decodeByteLevel(l, inv)
		rb, ok2 := decodeByteLevel(r, inv)
		li, ok3 := m.vocab[lb]
		ri, ok4 := m.vocab[rb]
		id, ok5 := m.vocab[lb+rb]
		if !(ok1 && ok2 && ok3 && ok4 && ok5) {
			return nil, fmt.Errorf("merges[%d] %q %q: a part or the result is not in the vocab", rank, l, r)
		}
		// A repeated pair takes its last rank, as the Rust library's map collection does.
		m.merges[pairKey(li, ri)] = merge{rank: uint32(rank), id: id}
	}
	return m, nil
}

// parseMerge reads a merge as "a b" or ["a", "b"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	var pair []string
	if err := json.Unmarshal(raw, &pair); err == nil {
		if len(pair) != 2 {
			return "", "", fmt.Errorf("%d parts", len(pair))
		}
		return pair[0], pair[1], nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "", err
	}
	l, r, ok := strings.Cut(s, " ")
	if !ok || strings.Contains(r, " ") {
		return "", "", fmt.Errorf("%q is not two parts", s)
	}
	return l, r, nil
}
