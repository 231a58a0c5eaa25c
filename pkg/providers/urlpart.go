package providers

import "unicode/utf8"

// MaxURLValue is the longest value, in bytes before escaping, that
// AppendPathSegment and AppendQueryValue accept. Model, deployment, file
// and batch ids of every provider are far shorter; Bedrock ARNs, the
// longest, stay under 300.
const MaxURLValue = 512

// AppendPathSegment appends s to dst escaped as exactly one URL path
// segment: every byte but the unreserved ones (A-Z a-z 0-9 - . _ ~) is
// percent-encoded, so "/", "?", "#", "%", ":" and the rest can never end
// the segment, start a query or a fragment, or reach a method suffix such
// as Gemini's ":generateContent". It is the one escaper every request
// builder uses for a value that a client can influence (a model name a
// wildcard route passes on, a deployment, a file or batch id).
//
// A value that cannot stand in a path segment at all is refused with a
// *ParamError for param: empty, "." or ".." (dot segments that servers
// and proxies resolve), control bytes (NUL, CR, LF, ...), bytes that are
// not UTF-8, or more than MaxURLValue bytes. dst is returned unchanged
// then.
func AppendPathSegment(dst []byte, param, s string) ([]byte, error) {
	if s == "." || s == ".." {
		return dst, &ParamError{Param: param, Code: CodeInvalidURLValue,
			Message: "the value \"" + s + "\" is a dot segment and cannot name a resource"}
	}
	if err := checkURLValue(param, s); err != nil {
		return dst, err
	}
	return appendEscaped(dst, s), nil
}

// AppendQueryValue appends s to dst escaped as one URL query key or value
// (the same unreserved set as AppendPathSegment, so "&", "=", "#" and "+"
// cannot start another parameter or end the query). It refuses what
// AppendPathSegment refuses but for the empty value ("?after=" is a
// query) and the dot segments, which mean nothing in a query.
func AppendQueryValue(dst []byte, param, s string) ([]byte, error) {
	if s == "" {
		return dst, nil
	}
	if err := checkURLValue(param, s); err != nil {
		return dst, err
	}
	return appendEscaped(dst, s), nil
}

// CodeInvalidURLValue is the ParamError code of a value that cannot be
// placed in an upstream URL.
const CodeInvalidURLValue = "invalid_url_value"

func checkURLValue(param, s string) error {
	switch {
	case s == "":
		return &ParamError{Param: param, Code: CodeInvalidURLValue, Message: "the value is empty"}
	case len(s) > MaxURLValue:
		return &ParamError{Param: param, Code: CodeInvalidURLValue,
			Message: "the value is longer than the 512 bytes an upstream URL part may take"}
	case !utf8.ValidString(s):
		return &ParamError{Param: param, Code: CodeInvalidURLValue, Message: "the value is not valid UTF-8"}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return &ParamError{Param: param, Code: CodeInvalidURLValue,
				Message: "the value contains a control character (e.g. NUL, CR or LF)"}
		}
	}
	return nil
}

// appendEscaped percent-encodes every byte of s but the unreserved ones (a
// space is "%20" in a query value too, which every server reads as "+").
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&0xf])
	}
	return dst
}
