package console

import "net/http"

// CSP is the Content-Security-Policy of every console answer: scripts,
// styles and fetches from the console's own origin only, no inline code,
// never framed, forms posting only to the console.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// setSecurityHeaders sets the headers every console answer carries; a
// page (not a static asset) is also never cached, since it shows one
// user's data.
func setSecurityHeaders(h http.Header, page bool) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if page {
		h.Set("Cache-Control", "no-store")
	} else {
		h.Set("Cache-Control", "private, max-age=3600")
	}
}
