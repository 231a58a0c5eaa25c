package mockllm

// The OpenAI endpoints beyond chat, completions and embeddings, with fixed,
// deterministic answers:
//
//	POST /v1/images/generations   n images (default 1), each {"url":"https://mock.invalid/images/<i>.png"}
//	POST /v1/audio/speech         audio/mpeg: 16 bytes per input character (X-Mock-Audio-Bytes or mock.audio_bytes overrides), a fixed byte pattern (PatternByte), streamed
//	POST /v1/moderations          one result per input, never flagged
//	POST /v1/audio/transcriptions multipart, the file streamed and counted, never held; duration = file bytes / 16000 s
//	POST /v1/audio/translations   (response_format json: {"text", "usage":{"type":"duration","seconds"}}; verbose_json: task, language, duration, text; text, srt, vtt: plain)
//	POST /v1/files                multipart upload streamed; the file object says its bytes and sha256
//	GET  /v1/files, /v1/files/{id}, /v1/files/{id}/content; DELETE /v1/files/{id}
//	POST /v1/batches, GET /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel
//
// Files and batches live in a small in-memory store (at most maxStored of
// each; more answers 429). A file's content is kept up to maxFileContent
// bytes; larger files keep only their size and digest, and their content
// endpoint answers the first maxFileContent bytes.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

const (
	maxStored      = 10000
	maxFileContent = 1 << 20
	// audioBytesPerSecond makes a transcription's duration: file bytes / this.
	audioBytesPerSecond = 16000
	// speechBytesPerChar is the size of a speech answer per input character.
	speechBytesPerChar = 16
)

// store holds the mock's files and batches.
type store struct {
	mu      sync.Mutex
	files   map[string]*mockFile // guarded by mu
	batches map[string]*mockBatch
	order   []string // file ids in creation order
	border  []string // batch ids in creation order
	next    int
}

type mockFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
	SHA256    string `json:"sha256"`
	content   []byte
}

type mockBatch struct {
	ID               string `json:"id"`
	Object           string `json:"object"`
	Endpoint         string `json:"endpoint"`
	InputFileID      string `json:"input_file_id"`
	CompletionWindow string `json:"completion_window"`
	Status           string `json:"status"`
	CreatedAt        int64  `json:"created_at"`
}

// routePassthrough serves the endpoints above; it reports whether path was one.
func (s *Server) routePassthrough(ctx *fasthttp.RequestCtx, path []byte) bool {
	p := string(path)
	switch {
	case p == "/v1/images/generations":
		if s.method(ctx, fasthttp.MethodPost) {
			s.images(ctx)
		}
	case p == "/v1/audio/speech":
		if s.method(ctx, fasthttp.MethodPost) {
			s.speech(ctx)
		}
	case p == "/v1/moderations":
		if s.method(ctx, fasthttp.MethodPost) {
			s.moderations(ctx)
		}
	case p == "/v1/audio/transcriptions" || p == "/v1/audio/translations":
		if s.method(ctx, fasthttp.MethodPost) {
			s.transcribe(ctx, strings.TrimPrefix(p, "/v1/audio/"))
		}
	case p == "/v1/files" || strings.HasPrefix(p, "/v1/files/"):
		s.filesAPI(ctx, strings.TrimPrefix(strings.TrimPrefix(p, "/v1/files"), "/"))
	case p == "/v1/batches" || strings.HasPrefix(p, "/v1/batches/"):
		s.batchesAPI(ctx, strings.TrimPrefix(strings.TrimPrefix(p, "/v1/batches"), "/"))
	default:
		return false
	}
	return true
}

// jsonBody reads a small JSON request body and its model; it answers 400
// itself and returns false when the body is not a JSON object with a model.
func (s *Server) jsonBody(ctx *fasthttp.RequestCtx) (gjson.Result, bool) {
	body := ctx.PostBody()
	root := gjson.ParseBytes(body)
	if !gjson.ValidBytes(body) || !root.IsObject() {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "body is not a JSON object", "", "invalid_json")
		return root, false
	}
	if root.Get("model").String() == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "you must provide a model parameter", "model", "missing_field")
		return root, false
	}
	b := resolveBehaviour(s.defaults, root.Get("mock"), &ctx.Request.Header)
	return root, s.prelude(ctx, &b, newStoppedTimer())
}

func (s *Server) images(ctx *fasthttp.RequestCtx) {
	root, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	n := 1
	if v := root.Get("n"); v.Exists() {
		n = int(v.Int())
	}
	if n < 1 || n > 10 {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "n must be from 1 to 10", "n", "invalid_value")
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"created":%d,"data":[`, time.Now().Unix())
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"url":"https://mock.invalid/images/%d.png","revised_prompt":"a mock image"}`, i)
	}
	b.WriteString("]}")
	ctx.SetContentType(contentJSON)
	ctx.SetBody(b.Bytes())
}

func (s *Server) speech(ctx *fasthttp.RequestCtx) {
	root, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	in := root.Get("input")
	if in.Type != gjson.String {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "input must be a string", "input", "missing_field")
		return
	}
	n := int64(utf8.RuneCountInString(in.Str)) * speechBytesPerChar
	if v := root.Get("mock.audio_bytes"); v.Type == gjson.Number {
		n = v.Int()
	}
	if v := ctx.Request.Header.Peek("X-Mock-Audio-Bytes"); len(v) > 0 {
		n, _ = strconv.ParseInt(string(v), 10, 64)
	}
	n = max(n, 0)
	ctx.SetContentType("audio/mpeg")
	ctx.SetBodyStream(&patternReader{left: n}, int(n))
}

// patternReader yields n bytes of a fixed pattern (byte i is i mod 251).
type patternReader struct {
	left int64
	off  int64
}

// PatternByte is byte i of every generated audio answer, for tests.
func PatternByte(i int64) byte { return byte(i % 251) }

// audioPattern holds the pattern from every phase for 64 KiB.
var audioPattern = func() []byte {
	b := make([]byte, 251+64<<10)
	for i := range b {
		b[i] = PatternByte(int64(i))
	}
	return b
}()

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.left, 64<<10))
	copy(p[:n], audioPattern[r.off%251:])
	r.off += int64(n)
	r.left -= int64(n)
	return n, nil
}

func (s *Server) moderations(ctx *fasthttp.RequestCtx) {
	root, ok := s.jsonBody(ctx)
	if !ok {
		return
	}
	n := 1
	if in := root.Get("input"); in.IsArray() {
		n = max(len(in.Array()), 1)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"id":"modr-%x","model":%s,"results":[`, s.newID(), strconv.Quote(root.Get("model").String()))
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"flagged":false,"categories":{"hate":false,"violence":false},"category_scores":{"hate":0.0001,"violence":0.0001}}`)
	}
	b.WriteString("]}")
	ctx.SetContentType(contentJSON)
	ctx.SetBody(b.Bytes())
}

// upload is a multipart form read as it streams: its fields (small) and
// its one file, counted and hashed, never held beyond keep bytes.
type upload struct {
	fields   map[string]string
	filename string
	bytes    int64
	sum      string
	head     []byte // the file's first keep bytes
}

// readUpload reads a multipart body part by part from the request stream.
func readUpload(ctx *fasthttp.RequestCtx, keep int) (*upload, error) {
	boundary := string(ctx.Request.Header.MultipartFormBoundary())
	if boundary == "" {
		return nil, fmt.Errorf("not multipart/form-data")
	}
	var body io.Reader
	if ctx.Request.IsBodyStream() {
		body = ctx.RequestBodyStream()
	} else {
		body = bytes.NewReader(ctx.PostBody())
	}
	u := &upload{fields: map[string]string{}}
	mr := multipart.NewReader(body, boundary)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return u, nil
		}
		if err != nil {
			return nil, err
		}
		if part.FileName() == "" {
			v, err := io.ReadAll(io.LimitReader(part, 64<<10))
			if err != nil {
				return nil, err
			}
			u.fields[part.FormName()] = string(v)
			continue
		}
		h := sha256.New()
		var head bytes.Buffer
		n, err := io.Copy(io.MultiWriter(h, &limitedWriter{w: &head, left: keep}), part)
		if err != nil {
			return nil, err
		}
		u.filename, u.bytes, u.sum, u.head = part.FileName(), n, hex.EncodeToString(h.Sum(nil)), head.Bytes()
	}
}

// limitedWriter keeps the first left bytes written and drops the rest.
type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left > 0 {
		k := min(l.left, len(p))
		_, _ = l.w.Write(p[:k])
		l.left -= k
	}
	return len(p), nil
}

func (s *Server) transcribe(ctx *fasthttp.RequestCtx, task string) {
	u, err := readUpload(ctx, 0)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "malformed multipart body", "", "invalid_multipart")
		return
	}
	if u.fields["model"] == "" || u.filename == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "model and file are required", "file", "missing_field")
		return
	}
	b := resolveBehaviour(s.defaults, gjson.Result{}, &ctx.Request.Header)
	if !s.prelude(ctx, &b, newStoppedTimer()) {
		return
	}
	s.stats.uploadBytes.Add(u.bytes)
	text := "the quick brown fox"
	duration := strconv.FormatFloat(float64(u.bytes)/audioBytesPerSecond, 'f', 3, 64)
	switch u.fields["response_format"] {
	case "text", "srt", "vtt":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString(text + "\n")
	case "verbose_json":
		ctx.SetContentType(contentJSON)
		ctx.SetBodyString(`{"task":"` + map[string]string{"transcriptions": "transcribe", "translations": "translate"}[task] + `","language":"english","duration":` + duration + `,"text":"` + text + `"}`)
	default:
		// As OpenAI's whisper-1 answers json: the text and the billed
		// duration.
		ctx.SetContentType(contentJSON)
		ctx.SetBodyString(`{"text":"` + text + `","usage":{"type":"duration","seconds":` + duration + `}}`)
	}
}

func (s *Server) filesAPI(ctx *fasthttp.RequestCtx, rest string) {
	id, sub, _ := strings.Cut(rest, "/")
	m := string(ctx.Method())
	switch {
	case id == "" && m == fasthttp.MethodPost:
		s.createFile(ctx)
	case id == "" && m == fasthttp.MethodGet:
		s.st.mu.Lock()
		list := make([]*mockFile, 0, len(s.st.order))
		for _, fid := range s.st.order {
			list = append(list, s.st.files[fid])
		}
		s.st.mu.Unlock()
		writeJSON(ctx, map[string]any{"object": "list", "data": list, "has_more": false})
	case id != "" && sub == "" && (m == fasthttp.MethodGet || m == fasthttp.MethodDelete):
		s.st.mu.Lock()
		f := s.st.files[id]
		if f != nil && m == fasthttp.MethodDelete {
			delete(s.st.files, id)
			s.st.order = removeID(s.st.order, id)
		}
		s.st.mu.Unlock()
		switch {
		case f == nil:
			writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "no such file", "id", "not_found")
		case m == fasthttp.MethodDelete:
			writeJSON(ctx, map[string]any{"id": id, "object": "file", "deleted": true})
		default:
			writeJSON(ctx, f)
		}
	case id != "" && sub == "content" && m == fasthttp.MethodGet:
		s.st.mu.Lock()
		f := s.st.files[id]
		s.st.mu.Unlock()
		if f == nil {
			writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "no such file", "id", "not_found")
			return
		}
		ctx.SetContentType("application/octet-stream")
		ctx.Response.Header.Set("Content-Disposition", `attachment; filename="`+f.Filename+`"`)
		ctx.SetBody(f.content)
	default:
		writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown path", "", "unknown_url")
	}
}

func (s *Server) createFile(ctx *fasthttp.RequestCtx) {
	u, err := readUpload(ctx, maxFileContent)
	if err != nil || u.filename == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "send a multipart form with a file", "file", "missing_field")
		return
	}
	s.stats.uploadBytes.Add(u.bytes)
	f := &mockFile{Object: "file", Bytes: u.bytes, CreatedAt: time.Now().Unix(), Filename: u.filename,
		Purpose: u.fields["purpose"], Status: "processed", SHA256: u.sum, content: u.head}
	s.st.mu.Lock()
	if len(s.st.files) >= maxStored {
		s.st.mu.Unlock()
		writeError(ctx, fasthttp.StatusTooManyRequests, "rate_limit_error", "mock file store is full", "", "store_full")
		return
	}
	s.st.next++
	f.ID = fmt.Sprintf("file-mock%d", s.st.next)
	s.st.files[f.ID] = f
	s.st.order = append(s.st.order, f.ID)
	s.st.mu.Unlock()
	writeJSON(ctx, f)
}

func (s *Server) batchesAPI(ctx *fasthttp.RequestCtx, rest string) {
	id, sub, _ := strings.Cut(rest, "/")
	m := string(ctx.Method())
	switch {
	case id == "" && m == fasthttp.MethodPost:
		root := gjson.ParseBytes(ctx.PostBody())
		if root.Get("input_file_id").String() == "" || root.Get("endpoint").String() == "" {
			writeError(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "input_file_id and endpoint are required", "input_file_id", "missing_field")
			return
		}
		b := &mockBatch{Object: "batch", Endpoint: root.Get("endpoint").String(), InputFileID: root.Get("input_file_id").String(),
			CompletionWindow: root.Get("completion_window").String(), Status: "validating", CreatedAt: time.Now().Unix()}
		s.st.mu.Lock()
		if len(s.st.batches) >= maxStored {
			s.st.mu.Unlock()
			writeError(ctx, fasthttp.StatusTooManyRequests, "rate_limit_error", "mock batch store is full", "", "store_full")
			return
		}
		s.st.next++
		b.ID = fmt.Sprintf("batch_mock%d", s.st.next)
		s.st.batches[b.ID] = b
		s.st.border = append(s.st.border, b.ID)
		s.st.mu.Unlock()
		writeJSON(ctx, b)
	case id == "" && m == fasthttp.MethodGet:
		s.st.mu.Lock()
		list := make([]mockBatch, 0, len(s.st.border))
		for _, bid := range s.st.border {
			list = append(list, *s.st.batches[bid])
		}
		s.st.mu.Unlock()
		writeJSON(ctx, map[string]any{"object": "list", "data": list, "has_more": false})
	case id != "" && (sub == "" && m == fasthttp.MethodGet || sub == "cancel" && m == fasthttp.MethodPost):
		s.st.mu.Lock()
		b := s.st.batches[id]
		var out mockBatch
		if b != nil {
			if sub == "cancel" {
				b.Status = "cancelled"
			}
			out = *b
		}
		s.st.mu.Unlock()
		if b == nil {
			writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "no such batch", "id", "not_found")
			return
		}
		writeJSON(ctx, out)
	default:
		writeError(ctx, fasthttp.StatusNotFound, "invalid_request_error", "unknown path", "", "unknown_url")
	}
}

func removeID(ids []string, id string) []string {
	for i, v := range ids {
		if v == id {
			return append(ids[:i], ids[i+1:]...)
		}
	}
	return ids
}

func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "server_error", "encode answer", "", "")
		return
	}
	ctx.SetContentType(contentJSON)
	ctx.SetBody(b)
}
