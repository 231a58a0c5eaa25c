package console

import (
	"crypto/subtle"
	"net/http"
)

// CSRFHeader is the header htmx requests carry the session's CSRF token
// in; forms carry it in the field CSRFField.
const (
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf"
)

// maxForm bounds a console form body.
const maxForm = 64 << 10

// checkCSRF reports whether r carries the CSRF token of its session s,
// in the header or the form field, compared in constant time. The token
// is random per session and never leaves it but in the session's own
// pages, so another site cannot know it. It parses r's form, at most
// maxForm bytes, for the handler to read.
func checkCSRF(w http.ResponseWriter, r *http.Request, s *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return false
	}
	tok := r.Header.Get(CSRFHeader)
	if tok == "" {
		tok = r.PostForm.Get(CSRFField)
	}
	return tok != "" && s.CSRF != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.CSRF)) == 1
}
