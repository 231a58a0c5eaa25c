package mockllm_test

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

// multipartBody builds a form: fields in order, then a file of n bytes.
func multipartBody(fields [][2]string, n int) (string, []byte) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		_ = w.WriteField(f[0], f[1])
	}
	if n >= 0 {
		fw, _ := w.CreateFormFile("file", "a.wav")
		_, _ = fw.Write(bytes.Repeat([]byte{1}, n))
	}
	_ = w.Close()
	return w.FormDataContentType(), b.Bytes()
}

func TestPassthroughEndpoints(t *testing.T) {
	ts := start(t, mockllm.Config{})
	verboseCT, verbose := multipartBody([][2]string{{"model", "whisper-1"}, {"response_format", "verbose_json"}}, 24_000)
	textCT, text := multipartBody([][2]string{{"model", "whisper-1"}, {"response_format", "text"}}, 10)
	jsonCT, jsonForm := multipartBody([][2]string{{"model", "whisper-1"}}, 8_000)
	noFileCT, noFile := multipartBody([][2]string{{"model", "whisper-1"}}, -1)
	fileCT, file := multipartBody([][2]string{{"purpose", "batch"}}, 5)
	tests := []struct {
		name, method, path, ct, body string
		headers                      []string
		status                       int
		want                         string // substring of the answer
		wantLen                      int
	}{
		{name: "images default n", method: "POST", path: "/v1/images/generations", body: `{"model":"dall-e-3","prompt":"x"}`,
			status: 200, want: `"data":[{"url":"https://mock.invalid/images/0.png"`},
		{name: "images n=2", method: "POST", path: "/v1/images/generations", body: `{"model":"dall-e-3","n":2}`,
			status: 200, want: `images/1.png`},
		{name: "images n too big", method: "POST", path: "/v1/images/generations", body: `{"model":"dall-e-3","n":11}`,
			status: 400, want: `"param":"n"`},
		{name: "images without model", method: "POST", path: "/v1/images/generations", body: `{"prompt":"x"}`,
			status: 400, want: `missing_field`},
		{name: "images injected status", method: "POST", path: "/v1/images/generations", body: `{"model":"dall-e-3"}`,
			headers: []string{"X-Mock-Status", "503"}, status: 503, want: `injected`},
		{name: "speech 16 bytes per character", method: "POST", path: "/v1/audio/speech", body: `{"model":"tts-1","input":"héllo"}`,
			status: 200, wantLen: 80},
		{name: "speech size from header", method: "POST", path: "/v1/audio/speech", body: `{"model":"tts-1","input":"x"}`,
			headers: []string{"X-Mock-Audio-Bytes", "100000"}, status: 200, wantLen: 100000},
		{name: "speech size from body", method: "POST", path: "/v1/audio/speech", body: `{"model":"tts-1","input":"x","mock":{"audio_bytes":7}}`,
			status: 200, wantLen: 7},
		{name: "moderation", method: "POST", path: "/v1/moderations", body: `{"model":"omni-moderation-latest","input":["a","b"]}`,
			status: 200, want: `"model":"omni-moderation-latest","results":[{"flagged":false`},
		{name: "transcription verbose", method: "POST", path: "/v1/audio/transcriptions", ct: verboseCT, body: string(verbose),
			status: 200, want: `"task":"transcribe","language":"english","duration":1.500`},
		{name: "translation text", method: "POST", path: "/v1/audio/translations", ct: textCT, body: string(text),
			status: 200, want: "the quick brown fox\n"},
		{name: "transcription json says its seconds", method: "POST", path: "/v1/audio/transcriptions", ct: jsonCT, body: string(jsonForm),
			status: 200, want: `"usage":{"type":"duration","seconds":0.500}`},
		{name: "transcription without file", method: "POST", path: "/v1/audio/transcriptions", ct: noFileCT, body: string(noFile),
			status: 400, want: `missing_field`},
		{name: "file upload", method: "POST", path: "/v1/files", ct: fileCT, body: string(file),
			status: 200, want: `"id":"file-mock1","object":"file","bytes":5`},
		{name: "file content", method: "GET", path: "/v1/files/file-mock1/content", status: 200, want: "\x01\x01\x01\x01\x01"},
		{name: "file list", method: "GET", path: "/v1/files", status: 200, want: `"data":[{"id":"file-mock1"`},
		{name: "batch create", method: "POST", path: "/v1/batches", body: `{"input_file_id":"file-mock1","endpoint":"/v1/chat/completions","completion_window":"24h"}`,
			status: 200, want: `"id":"batch_mock2"`},
		{name: "batch missing file", method: "POST", path: "/v1/batches", body: `{}`, status: 400, want: `input_file_id`},
		{name: "batch cancel", method: "POST", path: "/v1/batches/batch_mock2/cancel", status: 200, want: `"status":"cancelled"`},
		{name: "batch get", method: "GET", path: "/v1/batches/batch_mock2", status: 200, want: `"status":"cancelled"`},
		{name: "batch list", method: "GET", path: "/v1/batches", status: 200, want: `"batch_mock2"`},
		{name: "file delete", method: "DELETE", path: "/v1/files/file-mock1", status: 200, want: `"deleted":true`},
		{name: "file gone", method: "GET", path: "/v1/files/file-mock1", status: 404, want: `not_found`},
		{name: "batch unknown", method: "GET", path: "/v1/batches/nope", status: 404, want: `not_found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.url+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tt.ct != "" {
				req.Header.Set("Content-Type", tt.ct)
			}
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(got), tt.want) {
				t.Fatalf("status %d, body %.300q; want %d with %q", resp.StatusCode, got, tt.status, tt.want)
			}
			if tt.wantLen > 0 {
				if len(got) != tt.wantLen {
					t.Fatalf("answer is %d bytes, want %d", len(got), tt.wantLen)
				}
				for i, b := range got {
					if b != mockllm.PatternByte(int64(i)) {
						t.Fatalf("byte %d is %d, want %d", i, b, mockllm.PatternByte(int64(i)))
					}
				}
			}
		})
	}
	if got := ts.srv.Stats().UploadBytes; got != 24_000+10+8_000+5 {
		t.Errorf("UploadBytes = %d, want %d", got, 24_000+10+8_000+5)
	}
}
