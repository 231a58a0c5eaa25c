package config

// Model returns the model clients call name, or nil if there is none. It
// scans the list (models are few); callers on a hot path keep their own index.
func (c *Config) Model(name string) *Model {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i]
		}
	}
	return nil
}

// Provider returns the provider called name, or nil if there is none.
func (c *Config) Provider(name string) *Provider {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

// ExampleChatModel returns a chat model name the config serves as it is,
// for examples such as the start-up banner's curl: "mock-gpt" when it is
// configured, else the first chat model that is not a wildcard route (a
// pattern like "gemini/*" is not a name a client can send). ok is false
// when every chat model is a wildcard route.
func (c *Config) ExampleChatModel() (name string, ok bool) {
	if m := c.Model("mock-gpt"); m != nil && typeOf(m) == ModelTypeChat {
		return m.Name, true
	}
	for i := range c.Models {
		if m := &c.Models[i]; typeOf(m) == ModelTypeChat && !IsWildcard(m.Name) {
			return m.Name, true
		}
	}
	return "", false
}

// Issuer returns the auth.issuers entry named name, or nil.
func (c *Config) Issuer(name string) *Issuer {
	for i := range c.Auth.Issuers {
		if c.Auth.Issuers[i].Name == name {
			return &c.Auth.Issuers[i]
		}
	}
	return nil
}
