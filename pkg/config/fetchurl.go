package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckFetchURL reports whether the gateway may fetch raw, a discovery or
// JWKS URL: it must be absolute https://, or http:// when allowHTTP is set
// or the host is a loopback address (localhost, 127.0.0.0/8, ::1). Keys
// fetched in the clear off the machine could be replaced by anyone on the
// path.
func CheckFetchURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse %q: %w", raw, err)
	}
	if u.Host == "" || u.User != nil {
		return fmt.Errorf("%q: want an absolute URL with a host and no user info", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowHTTP || IsLoopbackHost(u.Hostname()) {
			return nil
		}
		return errors.New("plain http is only allowed to a loopback address or with allow_http")
	}
	return fmt.Errorf("%q: scheme must be https", raw)
}

// IsLoopbackHost reports whether host (without port) is localhost or a
// loopback IP address.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseClaimPath splits a claim path (see ClaimNames) into the member names
// it walks: a path without a leading "/" is one name, taken literally; one
// with it is a JSON Pointer whose segments are unescaped ("~1" is "/", "~0"
// is "~"). An empty path, or a "~" followed by anything but 0 or 1, is an
// error.
func ParseClaimPath(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("empty claim path")
	}
	if path[0] != '/' {
		return []string{path}, nil
	}
	segs := strings.Split(path[1:], "/")
	for i, s := range segs {
		if !strings.Contains(s, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			if s[j] != '~' {
				b.WriteByte(s[j])
				continue
			}
			if j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1') {
				return nil, fmt.Errorf("claim path %q: ~ must be followed by 0 or 1", path)
			}
			b.WriteByte("~/"[s[j+1]-'0'])
			j++
		}
		segs[i] = b.String()
	}
	return segs, nil
}
