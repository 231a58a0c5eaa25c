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
