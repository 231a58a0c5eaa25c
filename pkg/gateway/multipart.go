package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"

	"github.com/gofiber/fiber/v2"
)

// maxMultipartHead bounds what the gateway reads of a multipart upload
// before it finds the model field: the fields that come before it.
const maxMultipartHead = 64 << 10

// multipartHead is the start of a multipart upload, read up to and
// including its model field. The rest is still unread on the connection.
type multipartHead struct {
	prefix   []byte // every byte read from the client so far
	model    string
	valueAt  int // offset of the model value in prefix; -1 when not found
	boundary []byte
	rest     io.Reader
	size     int // the whole body's length, -1 when chunked
}

// readMultipartHead reads the parts of a multipart/form-data body up to the
// "model" field, which must come before any file part (the OpenAI Python
// SDK and curl -F in that order send it so). Fields before it are read and
// kept, up to 64 KiB in all; the file itself is never read here.
func readMultipartHead(c *fiber.Ctx) (multipartHead, *apiError) {
	h := multipartHead{valueAt: -1, boundary: append([]byte(nil), c.Request().Header.MultipartFormBoundary()...)}
	if len(h.boundary) == 0 {
		return h, errBadRequest("invalid_content_type", "", "send the request as multipart/form-data with a boundary")
	}
	src, size := requestStream(c)
	h.rest, h.size = src, size
	var buf bytes.Buffer
	mr := multipart.NewReader(io.TeeReader(io.LimitReader(src, maxMultipartHead), &buf), string(h.boundary))
	for {
		part, err := mr.NextRawPart()
		if err != nil {
			return h, multipartError(err, buf.Len(), "")
		}
		if part.FileName() != "" {
			return h, errBadRequest("model_after_file", "model",
				fmt.Sprintf("the model field must come before the file part %q: the gateway routes the upload by it without holding the file", part.FormName()))
		}
		if part.FormName() != "model" {
			if _, err := io.Copy(io.Discard, part); err != nil {
				return h, multipartError(err, buf.Len(), part.FormName())
			}
			continue
		}
		v, err := io.ReadAll(io.LimitReader(part, 257))
		if err != nil {
			return h, multipartError(err, buf.Len(), "model")
		}
		switch {
		case len(v) == 0:
			return h, errBadRequest(codeMissingField, "model", "you must provide a model parameter")
		case len(v) > 256:
			return h, errBadRequest("invalid_type", "model", "model is longer than 256 bytes")
		}
		h.model = string(v)
		break
	}
	h.prefix = buf.Bytes()
	h.valueAt = findModelValue(h.prefix, h.boundary, h.model)
	// The whole form is checked for a second model field: the head read
	// here at once (refused before any upstream call), the rest as it
	// streams to the provider.
	g := newModelGuard(h.rest, h.boundary)
	if err := g.scan(h.prefix); err != nil {
		return h, guardError(err)
	}
	h.rest = g
	return h, nil
}

// Refusals of modelGuard.
var (
	errDuplicateModel = errors.New("the form has more than one model field")
	errUnreadablePart = errors.New("a part header of the form cannot be read")
)

// guardError is the answer to an upload modelGuard refused.
func guardError(err error) *apiError {
	if errors.Is(err, errDuplicateModel) {
		return errBadRequest("duplicate_key", "model",
			"the form field \"model\" appears more than once; send one (the gateway routes and bills by it)")
	}
	return errBadRequest("invalid_multipart", "", "malformed multipart body: a part header is unreadable, too long or names no field")
}

// maxPartHeader bounds one part's header block as modelGuard collects it.
const maxPartHeader = 16 << 10

// modelGuard passes an upload's bytes through and refuses a second part
// named "model" with errDuplicateModel (issue #41): the gateway routes,
// checks and bills by the first, and a provider reading the last would
// serve another model. It reads each part's header block as the form
// streams by (the delimiter line, then the headers up to their blank line)
// and names the part as mime/multipart does; a header block it cannot read,
// over maxPartHeader or naming no field, is refused too
// (errUnreadablePart), since a provider might read a model in it. The
// bytes of a Read in which a refused header block ends are never returned,
// so the provider receives neither that block nor the end of the form: a
// cut request, which it does not serve. It allocates only for the header
// blocks.
type modelGuard struct {
	r        io.Reader
	boundary []byte
	// match counts the bytes of "\n--"+boundary matched so far (it starts
	// at 1: the first delimiter may open the body); after is the count of
	// bytes read on a delimiter's line; inHeader is set from that line's end
	// to the header block's blank line, whose bytes hdr collects.
	match, after int
	inHeader     bool
	closed       bool // the close delimiter was read: the rest is epilogue
	models       int  // parts named "model" so far
	hdr          []byte
	err          error
}

// newModelGuard checks the form read from r.
func newModelGuard(r io.Reader, boundary []byte) *modelGuard {
	return &modelGuard{r: r, boundary: boundary, match: 1, after: -1}
}

// Read implements io.Reader.
func (g *modelGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if n > 0 {
		if g.err = g.scan(p[:n]); g.err != nil {
			return 0, g.err
		}
	}
	return n, err
}

// scan advances the part header reader over b.
func (g *modelGuard) scan(b []byte) error {
	delimLen := 3 + len(g.boundary) // "\n--" + boundary
	for i := 0; i < len(b); i++ {
		if g.match == 0 && g.after < 0 && !g.inHeader {
			// Between delimiters (a file's bytes): on to the next line feed.
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return nil
			}
			i += j
		}
		c := b[i]
		switch {
		case g.closed:
			return nil
		case g.inHeader:
			g.hdr = append(g.hdr, c)
			if len(g.hdr) > maxPartHeader {
				return errUnreadablePart
			}
			if c == '\n' && (bytes.HasSuffix(g.hdr, []byte("\n\n")) || bytes.HasSuffix(g.hdr, []byte("\n\r\n"))) {
				g.inHeader = false
				if err := g.checkHeader(); err != nil {
					return err
				}
			}
		case g.after >= 0:
			// The rest of a delimiter line: "--" closes the form, a line
			// feed starts a part's header block.
			g.after++
			switch {
			case c == '-' && g.after <= 2:
				if g.after == 2 {
					g.closed = true
				}
			case c == '\n':
				g.after, g.inHeader = -1, true
				g.hdr = append(g.hdr[:0], '\n')
			}
		default:
			g.match = g.advance(c)
			if g.match == delimLen {
				g.match, g.after = 0, 0
			}
		}
	}
	return nil
}

// advance returns how much of "\n--"+boundary is matched after c, given
// g.match bytes matched before it. The delimiter's first byte, a line
// feed, occurs nowhere else in it, so a mismatch restarts the match at c.
func (g *modelGuard) advance(c byte) int {
	if g.delimByte(g.match) == c {
		return g.match + 1
	}
	if c == '\n' {
		return 1
	}
	return 0
}

// delimByte is byte i of "\n--"+boundary.
func (g *modelGuard) delimByte(i int) byte {
	switch i {
	case 0:
		return '\n'
	case 1, 2:
		return '-'
	}
	return g.boundary[i-3]
}

// checkHeader names the part whose header block g.hdr holds, as
// mime/multipart does, and counts the parts named "model".
func (g *modelGuard) checkHeader() error {
	tr := textproto.NewReader(bufio.NewReader(bytes.NewReader(bytes.TrimLeft(g.hdr, "\r\n"))))
	mh, err := tr.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return errUnreadablePart
	}
	cd := mh.Values("Content-Disposition")
	if len(cd) != 1 {
		return errUnreadablePart
	}
	if _, _, err := mime.ParseMediaType(cd[0]); err != nil {
		return errUnreadablePart
	}
	part := multipart.Part{Header: mh}
	if part.FormName() == "model" {
		if g.models++; g.models > 1 {
			return errDuplicateModel
		}
	}
	return nil
}

// multipartError explains why the parts before the model field could not
// be read.
func multipartError(err error, read int, part string) *apiError {
	switch {
	case read >= maxMultipartHead:
		return errBadRequest("model_field_too_late", "model",
			fmt.Sprintf("the model field must come within the first %d bytes of the form, before the file", maxMultipartHead))
	case errors.Is(err, io.EOF) && part == "":
		return errBadRequest(codeMissingField, "model", "you must provide a model parameter")
	case part != "":
		return errBadRequest("invalid_multipart", part, fmt.Sprintf("malformed multipart body in part %q: %v", part, err))
	}
	return errBadRequest("invalid_multipart", "", fmt.Sprintf("malformed multipart body: %v", err))
}

// findModelValue returns the offset of the model field's value in prefix,
// or -1: the value right after a part header naming "model", followed by
// the next boundary.
func findModelValue(prefix, boundary []byte, model string) int {
	needle := []byte(`name="model"`)
	delim := append([]byte("\r\n--"), boundary...)
	for off := 0; ; {
		i := bytes.Index(prefix[off:], needle)
		if i < 0 {
			return -1
		}
		i += off
		j := bytes.Index(prefix[i:], []byte("\r\n\r\n"))
		if j < 0 {
			return -1
		}
		at := i + j + 4
		end := at + len(model)
		if end <= len(prefix) && string(prefix[at:end]) == model && bytes.HasPrefix(prefix[end:], delim) {
			return at
		}
		off = i + len(needle)
	}
}

// streamMultipart sets the upload to stream: the head already read (the
// model value renamed when the target calls the model otherwise), then the
// rest straight from the client connection.
func (pc *passCall) streamMultipart(h *multipartHead, model string) *apiError {
	head, size := h.prefix, h.size
	if up := pc.rt.upstreamModel; up != model {
		if h.valueAt < 0 {
			return errBadRequest("invalid_multipart", "model", "the model field cannot be rewritten for this target: send it as a plain form field with CRLF line endings")
		}
		edited := make([]byte, 0, len(head)+len(up))
		edited = append(edited, head[:h.valueAt]...)
		edited = append(edited, up...)
		head = append(edited, head[h.valueAt+len(model):]...)
		if size >= 0 {
			size += len(up) - len(model)
		}
	}
	pc.upload, pc.size = io.MultiReader(bytes.NewReader(head), h.rest), size
	return nil
}
