// Package openai parses the parts of OpenAI /v1/completions and /v1/chat/completions request
// bodies that decide the prompt's tokens, with bounds on the body's size, JSON depth and message
// count. Every refusal is an *Error naming the field, matching ErrInvalid.
package openai
