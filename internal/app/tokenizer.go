package app

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/server"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// ModelConfig names a model's tokenizer files: a directory with its tokenizer.json and, for
// chat bodies, tokenizer_config.json (chat_template) or chat_template.jinja.
type ModelConfig struct {
	Name      string `yaml:"name"`
	Tokenizer string `yaml:"tokenizer"`
}

// ModelConfigs are the models whose prompts may come as text or OpenAI bodies.
type ModelConfigs []ModelConfig

// RegisterFlags adds --model NAME=DIR, repeatable, after the file's models.
func (m *ModelConfigs) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("model", "NAME=DIR: tokenize text and OpenAI-body prompts of model NAME with the tokenizer files in DIR (repeatable)", func(s string) error {
		name, dir, ok := strings.Cut(s, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("%q: want NAME=DIR", s)
		}
		*m = append(*m, ModelConfig{Name: name, Tokenizer: dir})
		return nil
	})
}

// Validate refuses a model without a name or directory, or named twice.
func (m ModelConfigs) Validate() error {
	seen := make(map[string]bool, len(m))
	for i, c := range m {
		switch {
		case c.Name == "":
			return fmt.Errorf("config: models[%d].name is empty", i)
		case c.Tokenizer == "":
			return fmt.Errorf("config: models[%d] (%s): tokenizer is empty: want the directory of its tokenizer.json", i, c.Name)
		case seen[c.Name]:
			return fmt.Errorf("config: models[%d]: model %q is listed twice", i, c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// tokenizerModule loads every configured model's tokenizer and chat template at start (a file
// it cannot load exactly stops the start-up) and gives them to the server.
func tokenizerModule(a *App) error {
	cfg := a.Config()
	models := make([]server.TextModel, 0, len(cfg.Models))
	for _, mc := range cfg.Models {
		m, err := loadModel(mc)
		if err != nil {
			return err
		}
		chat := "chat bodies refused: no chat template"
		if m.Template != nil {
			chat = "chat template " + m.Template.Name()
		}
		a.Logger().Info("tokenizer loaded", "model", mc.Name, "tokenizer", m.Tokenizer.Name(), "chat", chat)
		models = append(models, m)
	}
	return a.Server().SetText(server.TextConfig{Models: models, BlockSize: cfg.Scoring.BlockSize})
}

func loadModel(mc ModelConfig) (server.TextModel, error) {
	tk, err := tokenizer.Load(mc.Tokenizer)
	if err != nil {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	tm, err := chattemplate.Load(mc.Tokenizer)
	if err != nil && !errors.Is(err, chattemplate.ErrNoTemplate) {
		return server.TextModel{}, fmt.Errorf("model %s: %w", mc.Name, err)
	}
	return server.TextModel{Name: mc.Name, Tokenizer: tk, Template: tm}, nil
}
