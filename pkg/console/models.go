package console

import "net/http"

// modelsPage serves GET /ui/models: routes, targets, circuit state, and
// each served model's error rate and latency.
func (c *Console) modelsPage(w http.ResponseWriter, r *http.Request) {
	d := c.data()
	if d == nil {
		c.notConfigured(w, r)
		return
	}
	c.render(w, r, http.StatusOK, "models", "Models", d.Models(r.Context()))
}
