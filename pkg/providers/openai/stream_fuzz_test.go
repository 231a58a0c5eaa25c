package openai

import (
	"bytes"
	"testing"

	"github.com/tollgate/tollgate/pkg/providers"
	"github.com/tollgate/tollgate/pkg/sse"
)

// FuzzStream feeds arbitrary upstream bytes, framed by the gateway's SSE
// reader, to the stream decoder: each event is passed through unchanged or
// hidden (the usage chunk the client did not ask for), only [DONE] ends the
// stream, and a failure always carries an error.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\n",
		"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"error\":{\"message\":\"overloaded\"}}\n\n",
		": keep-alive\n\nevent: ping\ndata: {}\n\n",
		"data: {oops\n\n",
		"data: {\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":1e30}}\n\n",
		"data:[DONE]\r\n\r\n",
		"data: {\"a\":1}\ndata: {\"b\":2}\n\n",
	} {
		f.Add([]byte(s), false)
	}
	p, err := New(Options{Name: "fuzz", BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte, includeUsage bool) {
		s := p.Stream(&providers.Call{Stream: true, IncludeUsage: includeUsage})
		defer s.Close()
		rd := sse.NewReader(bytes.NewReader(in), 64, 1<<20)
		for {
			ev, ok := rd.Next()
			if !ok {
				if rd.Fill() != nil {
					return
				}
				continue
			}
			out, st, err := s.Event(nil, ev)
			if len(out) > 0 && !bytes.Equal(out, ev) {
				t.Fatalf("event %q came out as %q", ev, out)
			}
			_, data, _ := sse.Parse(ev, nil)
			switch st {
			case providers.Failed:
				if err == nil || len(out) > 0 {
					t.Fatalf("failure without error or with output: %q -> %q, %v", ev, out, err)
				}
				return
			case providers.Done:
				if string(data) != "[DONE]" || !s.Complete() {
					t.Fatalf("done on %q", ev)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v without failure on %q", err, ev)
			}
			if len(out) == 0 && includeUsage {
				t.Fatalf("event %q hidden from a client that asked for usage", ev)
			}
		}
	})
}
