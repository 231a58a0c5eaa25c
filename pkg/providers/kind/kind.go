// Package kind names the provider kinds (the values of a provider's `kind`
// in the config) and states, for each, what its configuration must say and
// which OpenAI endpoints it serves as they are. It imports nothing, so
// pkg/config validates against it without depending on the providers;
// pkg/providers/registry adds how each kind is built and authenticated.
//
// A new kind is one row in the table below and one in the registry's.
package kind

import "strings"

// Names of the kinds.
const (
	OpenAI    = "openai"    // any OpenAI-compatible server
	Azure     = "azure"     // Azure OpenAI
	Anthropic = "anthropic" // the Anthropic Messages API
	Gemini    = "gemini"    // the Gemini API
	Bedrock   = "bedrock"   // AWS Bedrock Converse
	Mock      = "mock"      // the built-in mock upstream
)

// BaseURL says what a kind's configuration must say about base_url.
type BaseURL uint8

// BaseURL rules.
const (
	// BaseURLRequired: base_url must be an http or https URL.
	BaseURLRequired BaseURL = iota
	// BaseURLUnlessPreset: required unless a preset names the server; when
	// set, it must be an http or https URL.
	BaseURLUnlessPreset
	// BaseURLOptional: empty means the kind's public endpoint; when set, it
	// must be an http or https URL.
	BaseURLOptional
	// BaseURLUnchecked: not validated; the gateway points the kind at its
	// in-process server.
	BaseURLUnchecked
)

// Spec is what one kind needs from its configuration and what it serves.
type Spec struct {
	// Name is the config's `kind` value.
	Name    string
	BaseURL BaseURL
	// APIVersion and Region report whether api_version and region are
	// required.
	APIVersion, Region bool
	// Presets are the preset names the kind accepts; nil when it takes
	// none.
	Presets []string
	// StreamUsage reports whether stream_usage is read and checked.
	StreamUsage bool
	// PassThrough reports whether the kind's servers serve OpenAI's
	// endpoints beyond chat, completions, embeddings and responses (files,
	// batches, images, audio, moderations) in the OpenAI format, so the
	// gateway passes them through and files_provider may name it.
	PassThrough bool
	// Deployments reports whether those endpoints live under Azure's
	// deployment URLs ({base}/openai/deployments/{model}/...) with an
	// api-version query parameter, rather than below the base URL.
	Deployments bool
}

// OpenAIPresets are the presets kind openai accepts: known OpenAI-compatible
// servers (pkg/providers/openai holds their base URLs and quirks).
var OpenAIPresets = []string{"openai", "vllm", "ollama", "lmstudio", "llamacpp", "groq", "together",
	"fireworks", "deepseek", "mistral", "openrouter", "xai", "perplexity", "cerebras"}

// specs lists the kinds in the order error messages name them.
var specs = []Spec{
	{Name: OpenAI, BaseURL: BaseURLUnlessPreset, Presets: OpenAIPresets, StreamUsage: true, PassThrough: true},
	{Name: Azure, BaseURL: BaseURLRequired, APIVersion: true, PassThrough: true, Deployments: true},
	{Name: Anthropic, BaseURL: BaseURLOptional},
	{Name: Gemini, BaseURL: BaseURLOptional},
	{Name: Bedrock, BaseURL: BaseURLOptional, Region: true},
	{Name: Mock, BaseURL: BaseURLUnchecked, PassThrough: true},
}

// Lookup returns the kind called name.
func Lookup(name string) (Spec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// All returns every kind, in the order error messages name them.
func All() []Spec {
	return append([]Spec(nil), specs...)
}

// List names the kinds for which keep reports true (all kinds when keep is
// nil) as an English list: "openai, azure or mock".
func List(keep func(Spec) bool) string {
	var names []string
	for _, s := range specs {
		if keep == nil || keep(s) {
			names = append(names, s.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
