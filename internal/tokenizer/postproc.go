package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

type templateJSON struct {
	Type   string `json:"type"`
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
	Processors []json.RawMessage `json:"processors"`
}

// parsePostProcessor returns the ids added before and after a single sequence when special
// tokens are added. ByteLevel changes only offsets; TemplateProcessing adds ids; a Sequence may
// hold both.
func parsePostProcessor(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var p templateJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, err
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		seen := false
		for i, sub := range p.Processors {
			pre, suf, err := parsePostProcessor(sub)
			if err != nil {
				return nil, nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if len(pre)+len(suf) > 0 {
				if seen {
					return nil, nil, errors.New("Sequence with two processors adding tokens")
				}
				seen, prefix, suffix = true, pre, suf
			}
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		return parseTemplate(&p)
	}
	return nil, nil, fmt.Errorf("type %q", p.Type)
}

func parseTemplate(p *templateJSON) (prefix, suffix []uint32, err error) {
	seq := false
	for _, piece := range p.Single {
		switch {
		case piece.Sequence != nil:
			if seq || piece.Sequence.ID != "A" {
				return nil, nil, errors.New("TemplateProcessing single is not one $A with special tokens")
			}
			seq = true
		case piece.SpecialToken != nil:
			st, ok := p.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return nil, nil, fmt.Errorf("TemplateProcessing names %q, not in special_tokens", piece.SpecialToken.ID)
			}
			if seq {
				suffix = append(suffix, st.IDs...)
			} else {
				prefix = append(prefix, st.IDs...)
			}
		default:
			return nil, nil, errors.New("TemplateProcessing piece neither SpecialToken nor Sequence")
		}
	}
	if !seq {
		return nil, nil, errors.New("TemplateProcessing single without $A")
	}
	return prefix, suffix, nil
}

// rebuildsPostProcessor names the transformers tokenizer classes that replace the file's
// post-processor at load with one built from add_bos_token and add_eos_token.
var rebuildsPostProcessor = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true,
	"CodeLlamaTokenizer": true, "CodeLlamaTokenizerFast": true,
	"GemmaTokenizer": true, "GemmaTokenizerFast": true,
}

type configJSON struct {
	TokenizerClass string          `json:"tokenizer_class"`
	AddBOS         *bool           `json:"add_bos_token"`
	AddEOS         *bool           `json:"add_eos_token"`
	BOS            json.RawMessage `json:"bos_token"`
	EOS            json.RawMessage `json:"eos_token"`
}

// tokenContent reads a special token given as a string or as {"content": ...}.
func tokenContent(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != "" {
		return o.Content, true
	}
	return "", false
}

// applyConfig applies tokenizer_config.json: for the classes that rebuild the post-processor,
// BOS and EOS come from add_bos_token (default true) and add_eos_token (default false).
func (t *Tokenizer) applyConfig(name string, data []byte) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t.class = c.TokenizerClass
	if !rebuildsPostProcessor[strings.TrimSpace(c.TokenizerClass)] {
		return nil
	}
	addBOS, addEOS := c.AddBOS == nil || *c.AddBOS, c.AddEOS != nil && *c.AddEOS
	t.prefix, t.suffix = nil, nil
	for _, x := range []struct {
		add  bool
		raw  json.RawMessage
		key  string
		dest *[]uint32
	}{{addBOS, c.BOS, "bos_token", &t.prefix}, {addEOS, c.EOS, "eos_token", &t.suffix}} {
		if !x.add {
			continue
		}
		s, ok := tokenContent(x.raw)
		if !ok {
			return fmt.Errorf("%s: %s class %s adds %s but none is set: %w", name, x.key, c.TokenizerClass, x.key, ErrUnsupported)
		}
		id, ok := t.tokenID(s)
		if !ok {
			return fmt.Errorf("%s: %s %q is not a token", name, x.key, s)
		}
		*x.dest = []uint32{id}
	}
	return nil
}
