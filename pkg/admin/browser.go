package admin

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// hostSet is what the Host header of an /admin/ or /debug/ request may
// name (see the package documentation, Access).
type hostSet struct {
	names map[string]bool // lowercase, without a trailing dot
	ips   map[netip.Addr]bool
	anyIP bool // bound to a wildcard address: every IP of the machine is the listener's
}

// newHostSet is the host set of a listener on addr, started with the
// listen address host listenHost ("" when unknown), with the configured
// extra names.
func newHostSet(addr net.Addr, listenHost string, extra []string) hostSet {
	hs := hostSet{names: map[string]bool{"localhost": true}, ips: map[netip.Addr]bool{}}
	if a, ok := addr.(*net.TCPAddr); ok {
		hs.addIP(a.IP)
	}
	for _, h := range append([]string{listenHost}, extra...) {
		h = normHost(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			hs.addIP(ip)
			continue
		}
		hs.names[h] = true
	}
	return hs
}

func (hs *hostSet) addIP(ip net.IP) {
	if ip.IsUnspecified() {
		hs.anyIP = true
		return
	}
	if a, ok := netip.AddrFromSlice(ip); ok {
		hs.ips[a.Unmap()] = true
	}
}

// allows reports whether a Host header value names this listener. An
// empty Host (HTTP/1.0 without one) is allowed: browsers always send one.
func (hs *hostSet) allows(host string) bool {
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	h = normHost(h)
	if h == "" {
		return host == ""
	}
	if a, err := netip.ParseAddr(h); err == nil {
		a = a.Unmap()
		return a.IsLoopback() || hs.anyIP || hs.ips[a.WithZone("")]
	}
	return hs.names[h]
}

// normHost lowercases h and drops IPv6 brackets and a trailing dot.
func normHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return h
}

// safeMethod reports whether m is a method that changes nothing here.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkBrowser refuses, with a JSON error, a request that names another
// host, a browser's cross-origin request that may change state, and a
// state-changing request whose body is not JSON; it reports whether the
// request may go on.
func (s *Server) checkBrowser(w http.ResponseWriter, r *http.Request) bool {
	if !s.checkSite(w, r) {
		return false
	}
	if safeMethod(r.Method) {
		return true
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return true // curl -X POST .../reload: no body to misread
		}
	} else if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	s.refuse(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type",
		`send the body as "Content-Type: application/json" (or no body and no Content-Type)`)
	return false
}

// checkSite refuses a request that names another host and a browser's
// cross-origin request that may change state: the checks of every
// request to /admin/, /debug/ and the console alike.
func (s *Server) checkSite(w http.ResponseWriter, r *http.Request) bool {
	if !s.hosts.allows(r.Host) {
		s.refuse(w, r, http.StatusForbidden, "host_not_allowed",
			"the Host header does not name this admin listener: use a loopback address or localhost, or add the name to admin.allowed_hosts")
		return false
	}
	if safeMethod(r.Method) {
		return true
	}
	if err := s.cop.Check(r); err != nil {
		s.refuse(w, r, http.StatusForbidden, "cross_site_request",
			"a cross-origin browser request may not change anything on the admin listener")
		return false
	}
	return true
}

// site serves the console: its requests pass checkSite first; the
// console signs its users in by itself, never by the admin token, and
// checks a CSRF token on every form it receives.
func (s *Server) site(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.checkSite(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}
