package gateway

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestBodiesReachUpstreamIntact: concurrent requests of different sizes,
// inside and past the 8 KiB fasthttp reads with the headers, non-stream
// and streamed (whose answers are written after the handler returns),
// each reach the upstream intact: the mock counts the words of every
// message (plus 3 per message), and each request has its own count, so a
// body buffer shared between requests shows as a wrong count or a broken
// body.
func TestBodiesReachUpstreamIntact(t *testing.T) {
	r := newRig(t, nil) // body_limit 65536
	tok := r.token(nil)
	usage := regexp.MustCompile(`"prompt_tokens":(\d+)`)
	const workers, each = 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				words := 50 + w*each*90 + i*90 // 50..8,600 words: bodies of 0.5 to 60 KB
				stream := (w+i)%2 == 1
				body := fmt.Sprintf(`{"model":"mock-gpt","stream":%t,"stream_options":%s,"messages":[{"role":"user","content":"%s"}]}`,
					stream, map[bool]string{true: `{"include_usage":true}`, false: `null`}[stream],
					strings.TrimSpace(strings.Repeat("word"+strconv.Itoa(w)+" ", words)))
				req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := httpClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("%d words, stream %t: status %d, %v: %.200s", words, stream, resp.StatusCode, err, got)
					continue
				}
				m := usage.FindAllSubmatch(got, -1)
				if len(m) == 0 || string(m[len(m)-1][1]) != strconv.Itoa(words+3) {
					errs <- fmt.Errorf("%d words, stream %t: the upstream counted %q", words, stream, m)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestBodyCutShort: a client that promises more bytes than it sends and
// then closes its side gets a 400 that says the body could not be read,
// not a verdict on the part that arrived (fasthttp answers a body cut
// inside its first 8 KiB itself; limitBody the rest).
func TestBodyCutShort(t *testing.T) {
	r := newRig(t, nil)
	tok := r.token(nil)
	for _, sent := range []int{100, 12 << 10} { // inside and past the 8 KiB fasthttp reads with the headers
		t.Run(strconv.Itoa(sent), func(t *testing.T) {
			body := `{"model":"mock-gpt","messages":[{"role":"user","content":"` + strings.Repeat("x", 30000) + `"}]}`
			resp, got := r.rawSend(t, requestHead(tok, "Content-Length: "+strconv.Itoa(len(body)))+body[:sent], true)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, got)
			}
			errorShape(t, got, typeInvalidRequest, "")
			if want := map[bool]string{true: "unexpected EOF", false: "ended before its Content-Length"}[sent < 8<<10]; !strings.Contains(string(got), want) {
				t.Errorf("the error does not say the body was cut short: %s", got)
			}
		})
	}
}
