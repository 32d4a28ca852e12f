package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/bench/textgen"
	"github.com/kvrouter/kvrouter/bench/tracegen"
)

const genUsage = `usage: kvbench gen [flags]

Writes a synthetic Mooncake-format trace (JSONL: timestamp ms, input_length,
output_length, hash_ids; one id per --block-tokens tokens, prefix-chained:
equal ids at position k mean equal prompts up to the end of block k). The same
flags and seed give the same bytes. Replay it with
  kvbench compare --trace FILE --trace-block-tokens N (N = --block-tokens).

Shapes (--shape):
  chat   conversations sharing a few system prompts (Zipf popularity); turn n's
         prompt = system + every earlier message and answer + a new user
         message; think time between an answer and the next turn.
  agent  agentic loops: system prompt with tools + task, then many steps; each
         step appends the short tool call and the tool's output, so the context
         grows and each step extends the previous one.
  rag    system prompt + --rag-k documents drawn by Zipf popularity from a
         corpus + a question; popular documents recur.
  mix    each request's shape drawn with --mix's weights.

Arrivals (--arrival), with mean rate --rate requests/s whatever the shape:
  poisson  exponential gaps.
  bursty   on/off Markov-modulated Poisson: on and off periods exponential with
           means --burst-on and --burst-off, requests only while on at
           rate*(on+off)/on.
  diurnal  Poisson with rate rate*(1 - amplitude*cos(2 pi t/period)): trough at
           t=0, peak at period/2 (period 0: the trace's duration).
Each arrival is the next step of the chat/agent session that has waited
longest past its ready time (answer generated at --gen-per-token, then its
think/tool time), else the start of a new session.

Distributions (lengths in tokens, times in seconds): const:V, uniform:MIN,MAX,
lognormal:MEAN,SIGMA (MEAN of the value, SIGMA of its log), exp:MEAN.

Flags:
`

// runGen parses `kvbench gen`'s flags and writes the trace. It is longer
// than ~80 lines for its flag list, one line per flag.
func runGen(args []string) error {
	fs := flag.NewFlagSet("kvbench gen", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), genUsage)
		fs.PrintDefaults()
	}
	c := tracegen.DefaultConfig()
	var (
		out      = fs.String("out", "-", "output file (- for standard output)")
		summary  = fs.Bool("summary", true, "print a summary of the trace per shape on standard error")
		burstOn  = fs.Duration("burst-on", secs(c.Arrival.BurstOn), "bursty: mean on period")
		burstOff = fs.Duration("burst-off", secs(c.Arrival.BurstOff), "bursty: mean off period")
		period   = fs.Duration("diurnal-period", 0, "diurnal: period of the rate (0: the trace's duration)")
		textTok  = fs.String("text-tokenizer", "", "also write each prompt as \"text\" made for this tokenizer (qwen3, llama3 or a directory): it encodes to exactly the trace's blocks")
		textForm = fs.String("text-form", "text", "with --text-tokenizer: completions or chat also writes \"openai_body\", that body for --text-model")
		model    = fs.String("text-model", "bench-model", "the model name in OpenAI bodies")
	)
	fs.StringVar(&c.Shape, "shape", c.Shape, "chat, agent, rag or mix")
	fs.Var(&c.Mix, "mix", "mix: fraction of requests per shape")
	fs.StringVar(&c.Arrival.Process, "arrival", c.Arrival.Process, "arrival process: poisson, bursty or diurnal")
	fs.Float64Var(&c.Arrival.Rate, "rate", c.Arrival.Rate, "mean requests per second")
	fs.Float64Var(&c.Arrival.Amplitude, "diurnal-amplitude", c.Arrival.Amplitude, "diurnal: relative amplitude of the rate, 0..1 (peak/trough = (1+a)/(1-a))")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "trace duration")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "generate this long before the trace starts and drop it, so the trace opens with sessions in progress")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
	fs.IntVar(&c.BlockTokens, "block-tokens", c.BlockTokens, "tokens one hash id stands for")
	fs.IntVar(&c.MaxContext, "max-context", c.MaxContext, "longest prompt in tokens: a session ends before exceeding it, a RAG prompt takes fewer documents")
	fs.DurationVar(&c.GenPerToken, "gen-per-token", c.GenPerToken, "answer generation time per output token, before a session's next step may arrive")
	fs.Float64Var(&c.Zipf, "zipf", c.Zipf, "Zipf exponent of system prompt popularity (all shapes)")

	fs.IntVar(&c.Chat.SystemPrompts, "chat-system-prompts", c.Chat.SystemPrompts, "chat: distinct system prompts")
	fs.Var(&c.Chat.SystemLen, "chat-system-len", "chat: system prompt tokens")
	fs.Var(&c.Chat.UserLen, "chat-user-len", "chat: user message tokens")
	fs.Var(&c.Chat.OutputLen, "chat-output-len", "chat: answer tokens")
	fs.Var(&c.Chat.Turns, "chat-turns", "chat: turns per conversation")
	fs.Var(&c.Chat.Think, "chat-think", "chat: seconds from an answer to the next turn")

	fs.IntVar(&c.Agent.SystemPrompts, "agent-system-prompts", c.Agent.SystemPrompts, "agent: distinct system prompts (with tool definitions)")
	fs.Var(&c.Agent.SystemLen, "agent-system-len", "agent: system prompt tokens")
	fs.Var(&c.Agent.TaskLen, "agent-task-len", "agent: task message tokens")
	fs.Var(&c.Agent.ToolLen, "agent-tool-len", "agent: tokens of each tool output appended")
	fs.Var(&c.Agent.OutputLen, "agent-output-len", "agent: tool call (output) tokens")
	fs.Var(&c.Agent.Steps, "agent-steps", "agent: steps per loop")
	fs.Var(&c.Agent.ToolTime, "agent-tool-time", "agent: seconds from a tool call to the next step")

	fs.IntVar(&c.RAG.SystemPrompts, "rag-system-prompts", c.RAG.SystemPrompts, "rag: distinct system prompts")
	fs.Var(&c.RAG.SystemLen, "rag-system-len", "rag: system prompt tokens")
	fs.IntVar(&c.RAG.Corpus, "rag-corpus", c.RAG.Corpus, "rag: documents in the corpus")
	fs.Float64Var(&c.RAG.Zipf, "rag-zipf", c.RAG.Zipf, "rag: Zipf exponent of document popularity")
	fs.IntVar(&c.RAG.K, "rag-k", c.RAG.K, "rag: documents per prompt")
	fs.Var(&c.RAG.DocLen, "rag-doc-len", "rag: document tokens (drawn once per document)")
	fs.Var(&c.RAG.QuestionLen, "rag-question-len", "rag: question tokens")
	fs.Var(&c.RAG.OutputLen, "rag-output-len", "rag: answer tokens")
	fs.StringVar(&c.RAG.Order, "rag-order", c.RAG.Order, "rag: document order in the prompt: relevance (as drawn) or popularity (most popular first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gen: unexpected arguments %q", fs.Args())
	}
	c.Arrival.BurstOn, c.Arrival.BurstOff, c.Arrival.Period = burstOn.Seconds(), burstOff.Seconds(), period.Seconds()
	reqs, err := tracegen.Generate(c)
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if *textTok != "" {
		form, err := textgen.ParseForm(*textForm)
		if err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		lex, _, cleanup, err := loadLexicon(*textTok)
		if err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		defer cleanup()
		if err := writeTextTrace(*out, reqs, c.BlockTokens, lex, form, *model); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	} else if err := tracegen.WriteFile(*out, reqs); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if *summary {
		fmt.Fprintf(os.Stderr, "kvbench gen: %s trace, %s arrivals at %g/s over %v, seed %d, %d-token blocks -> %s\n",
			c.Shape, c.Arrival.Process, c.Arrival.Rate, c.Duration, c.Seed, c.BlockTokens, *out)
		tracegen.WriteSummaries(os.Stderr, tracegen.Summarize(reqs, c.Duration))
	}
	return nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
