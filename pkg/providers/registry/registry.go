// Package registry is the table of provider kinds: for each `kind` a config
// may name, what its configuration needs (package kind), where its public
// API lives, when it has a credential, how a rotated key is sent, which
// endpoints it serves and how its Provider is built. The gateway asks a
// Kind; nothing outside pkg/providers switches on a kind's name (issue #12).
//
// It lives apart from pkg/providers because it imports every kind's
// subpackage, and they import pkg/providers.
package registry

import (
	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/providers/anthropic"
	"github.com/tollgate/tollgate/pkg/providers/bedrock"
	"github.com/tollgate/tollgate/pkg/providers/gemini"
	"github.com/tollgate/tollgate/pkg/providers/kind"
	"github.com/tollgate/tollgate/pkg/providers/openai"
	"github.com/valyala/fasthttp"
)

// Kind is one provider kind. Its methods take the provider's config and are
// safe for concurrent use; a Kind is never modified.
type Kind struct {
	kind.Spec
	endpoints []providers.Endpoint
	// keyHeader and keyPrefix send an API key: keyHeader: keyPrefix+key.
	// An empty keyHeader means api_keys do not apply (SigV4 credentials
	// are per provider).
	keyHeader, keyPrefix string
	defaultBaseURL       func(p *config.Provider) string // "" when there is none
	sigV4                bool                            // access key and secret count as a credential
	keyless              bool                            // needs no credential
	reasoningEffort      bool                            // its chat translation takes reasoning_effort
	build                func(p *config.Provider) (providers.Provider, error)
}

const (
	bearerHeader = "Authorization"
	bearerPrefix = "Bearer "
)

var openAIEndpoints = []providers.Endpoint{providers.Chat, providers.Completions, providers.Embeddings, providers.Responses}

// kinds lists every kind, in kind.All's order.
var kinds = []*Kind{
	{
		Spec: spec(kind.OpenAI), endpoints: openAIEndpoints, keyHeader: bearerHeader, keyPrefix: bearerPrefix,
		reasoningEffort: true,
		defaultBaseURL:  func(p *config.Provider) string { return openai.Presets[p.Preset].BaseURL },
		build:           newOpenAI(false),
	},
	{
		Spec: spec(kind.Azure), endpoints: openAIEndpoints, keyHeader: openai.AzureKeyHeader, reasoningEffort: true,
		build: newOpenAI(true),
	},
	{
		Spec: spec(kind.Anthropic), endpoints: []providers.Endpoint{providers.Chat}, keyHeader: anthropic.KeyHeader,
		reasoningEffort: true,
		defaultBaseURL:  func(*config.Provider) string { return anthropic.DefaultBaseURL },
		build: func(p *config.Provider) (providers.Provider, error) {
			return anthropic.New(anthropic.Options{Name: p.Name, BaseURL: p.BaseURL, APIKey: p.APIKey, Version: p.APIVersion, Headers: p.Headers})
		},
	},
	{
		Spec: spec(kind.Gemini), endpoints: []providers.Endpoint{providers.Chat, providers.Embeddings}, keyHeader: gemini.KeyHeader,
		reasoningEffort: true,
		defaultBaseURL:  func(*config.Provider) string { return gemini.DefaultBaseURL },
		build: func(p *config.Provider) (providers.Provider, error) {
			return gemini.New(gemini.Options{Name: p.Name, BaseURL: p.BaseURL, APIKey: p.APIKey, APIVersion: p.APIVersion, Headers: p.Headers})
		},
	},
	{
		Spec: spec(kind.Bedrock), endpoints: []providers.Endpoint{providers.Chat}, sigV4: true,
		defaultBaseURL: func(p *config.Provider) string { return bedrock.DefaultBaseURL(p.Region) },
		build: func(p *config.Provider) (providers.Provider, error) {
			return bedrock.New(bedrock.Options{Name: p.Name, BaseURL: p.BaseURL, APIKey: p.APIKey, Region: p.Region,
				AccessKeyID: p.AccessKeyID, SecretAccessKey: p.SecretAccessKey, SessionToken: p.SessionToken, Headers: p.Headers})
		},
	},
	{
		Spec: spec(kind.Mock), endpoints: openAIEndpoints, keyHeader: bearerHeader, keyPrefix: bearerPrefix, keyless: true,
		reasoningEffort: true,
		build:           newOpenAI(false),
	},
}

// spec returns the kind package's Spec for name, which must exist.
func spec(name string) kind.Spec {
	s, ok := kind.Lookup(name)
	if !ok {
		panic("registry: no kind " + name)
	}
	return s
}

// newOpenAI builds the OpenAI-format kinds: any OpenAI-compatible server,
// the mock, and Azure's deployment URLs.
func newOpenAI(azure bool) func(p *config.Provider) (providers.Provider, error) {
	return func(p *config.Provider) (providers.Provider, error) {
		return openai.New(openai.Options{
			Name: p.Name, BaseURL: p.BaseURL, APIKey: p.APIKey, Preset: p.Preset,
			Azure: azure, APIVersion: p.APIVersion,
			StreamUsage: openai.StreamUsage(p.StreamUsage), Headers: p.Headers,
		})
	}
}

// Lookup returns the kind called name (a provider's config `kind`).
func Lookup(name string) (*Kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// All returns every kind, in the order error messages name them.
func All() []*Kind {
	return append([]*Kind(nil), kinds...)
}

// BaseURL returns where provider p's API lives: its base_url, else the
// kind's public endpoint (for kind openai, its preset's; for bedrock, its
// region's), else "".
func (k *Kind) BaseURL(p config.Provider) string {
	if p.BaseURL != "" || k.defaultBaseURL == nil {
		return p.BaseURL
	}
	return k.defaultBaseURL(&p)
}

// HasKey reports whether provider p has a credential: an api_key, or, for
// kinds that sign with SigV4, an access key and secret; the mock needs none.
func (k *Kind) HasKey(p config.Provider) bool {
	return p.APIKey != "" || k.keyless || k.sigV4 && p.AccessKeyID != "" && p.SecretAccessKey != ""
}

// Key returns the request header that sends API key key, and its value. ok
// is false for kinds whose credentials are not API keys (api_keys do not
// apply to them).
func (k *Kind) Key(key string) (header, value string, ok bool) {
	if k.keyHeader == "" {
		return "", "", false
	}
	return k.keyHeader, k.keyPrefix + key, true
}

// SetKey replaces the credentials a Provider's Build wrote into req with
// key, one of a target's api_keys in rotation. It does nothing for kinds
// whose credentials are not API keys.
func (k *Kind) SetKey(req *fasthttp.Request, key string) {
	if h, v, ok := k.Key(key); ok {
		req.Header.Set(h, v)
	}
}

// Speaks reports whether the kind's servers can serve endpoint ep. Whether
// one provider's server serves the Responses API is that Provider's answer
// (pkg/providers/openai: some presets do not).
func (k *Kind) Speaks(ep providers.Endpoint) bool {
	for _, e := range k.endpoints {
		if e == ep {
			return true
		}
	}
	return false
}

// ReasoningEffort reports whether the kind's chat translation takes an
// OpenAI reasoning_effort (OpenAI-format kinds pass it on, gemini maps it to
// thinkingConfig, anthropic to thinking). For a kind without one (bedrock
// refuses it) the effort a /v1/messages request asks for is dropped.
func (k *Kind) ReasoningEffort() bool { return k.reasoningEffort }

// New builds provider p's wire protocol.
func (k *Kind) New(p config.Provider) (providers.Provider, error) {
	return k.build(&p)
}
