package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"

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
	return h, nil
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
