package epp

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// scanRequest reads an OpenAI request's model and prompt in one pass over
// its top-level object, without reflection: encoding/json spends more on
// an 8k-token body than the router spends routing it. It takes only a
// plain form: keys without escapes, values it can delimit; every value but
// the prompt is checked with json.Valid, and a prompt of token ids must
// parse (parseIDs) for ok. ok is false for anything else, which
// encoding/json then reads (promptOf), so what a body means, and every
// error, is encoding/json's.
func scanRequest(b []byte) (model string, prompt []byte, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return "", nil, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return "", nil, false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return "", nil, false
		}
		key := b[i+1 : i+1+end]
		if !plainKey(key) {
			return "", nil, false
		}
		i = skipSpace(b, i+2+end)
		if i >= len(b) || b[i] != ':' {
			return "", nil, false
		}
		i = skipSpace(b, i+1)
		vEnd, vok := valueEnd(b, i)
		if !vok {
			return "", nil, false
		}
		v := b[i:vEnd]
		switch string(key) {
		case "model":
			// encoding/json replaces invalid UTF-8 with U+FFFD; such a
			// name is left to it.
			if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) || !json.Valid(v) {
				return "", nil, false
			}
			model = string(v[1 : len(v)-1])
		case "prompt":
			prompt = v
			if len(v) > 0 && v[0] == '[' {
				break // checked by its parser
			}
			fallthrough
		default:
			if !json.Valid(v) {
				return "", nil, false
			}
		}
		i = skipSpace(b, vEnd)
		if i >= len(b) {
			return "", nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return model, prompt, skipSpace(b, i+1) == len(b)
		default:
			return "", nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// valueEnd is the end of the JSON value starting at b[i]: strings (with
// escapes), arrays and objects (nesting counted, strings inside skipped),
// or a literal up to its delimiter. It delimits; it does not validate.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			k, ok := stringEnd(b, j)
			if !ok {
				return 0, false
			}
			if depth == 0 {
				return k, true
			}
			j = k - 1
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 {
				return j, j > i // a literal ends here
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return len(b), depth == 0
}

// stringEnd is the end of the JSON string starting at b[i] (past its
// closing quote).
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// plainKey: key has no escape, no control byte (which JSON forbids
// unescaped in a string) and no non-ASCII byte, and if it names
// model or prompt (encoding/json matches names case-insensitively) it does
// so exactly.
func plainKey(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return false
		}
	}
	for _, name := range []string{"model", "prompt"} {
		if bytes.EqualFold(key, []byte(name)) && string(key) != name {
			return false
		}
	}
	return true
}
