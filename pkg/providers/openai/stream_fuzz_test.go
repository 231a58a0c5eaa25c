package openai

import (
	"bytes"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/pricing"
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
		"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"a \\\"q\\\" \\u00e9\"},\"finish_reason\":null},{\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"choices\":{\"0\":{\"finish_reason\":\"stop\",\"delta\":{\"content\":\"x\"}}}}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"1\",\"content\":\"2\"},\"delta\":{\"content\":\"3\"},\"finish_\\u0072eason\":\"length\"}]}\n\n",
		"data:{\"choices\":[{\"delta\":{},\"delta\":{\"content\":\"0\"}}]}\n\n",
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
		var ref refStream
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
			ref.event(ev, includeUsage)
			if st != ref.st || (len(out) == 0) != ref.hidden || s.Complete() != ref.complete || s.Usage() != ref.usage ||
				(st == providers.Failed && err.Error() != ref.msg) {
				t.Fatalf("event %q: state %v hidden %v complete %v usage %+v err %v; the gjson reference says %v %v %v %+v %q",
					ev, st, len(out) == 0, s.Complete(), s.Usage(), err, ref.st, ref.hidden, ref.complete, ref.usage, ref.msg)
			}
			if got := s.(providers.ContentStream).LastContent(); got != ref.content {
				t.Fatalf("event %q: content %q; the gjson reference says %q", ev, got, ref.content)
			}
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

// refStream is the chunk decoder as it was written with one gjson lookup
// per member (validity first), the reference the one-pass decoder must
// agree with on every input.
type refStream struct {
	content  string // choices[0].delta.content between its quotes
	st       providers.State
	hidden   bool
	msg      string
	complete bool
	usage    providers.Usage
}

func (r *refStream) event(ev []byte, includeUsage bool) {
	_, data, _ := sse.Parse(ev, nil)
	r.st, r.hidden, r.msg, r.content = providers.More, false, "", ""
	switch {
	case len(data) == 0:
		return
	case string(data) == "[DONE]":
		r.complete, r.st = true, providers.Done
		return
	case !providers.ValidJSON(data):
		r.st, r.hidden, r.msg = providers.Failed, true, providers.ErrMalformed.Error()
		return
	}
	d := string(data)
	if e := gjson.Get(d, "error"); e.Exists() {
		msg := e.Get("message").String()
		if msg == "" {
			msg = "error event"
		}
		r.st, r.hidden, r.msg = providers.Failed, true, msg
		return
	}
	// choices must be an array: gjson would also read "0" as an object key.
	if c := gjson.Get(d, "choices"); c.IsArray() {
		if fr := c.Get("0.finish_reason"); fr.Exists() && fr.Type != gjson.Null {
			r.complete = true
		}
		// One Get per key: a dotted path would look past a first "delta"
		// without content into a repeated one; the first key wins.
		if v := c.Get("0").Get("delta").Get("content"); v.Type == gjson.String {
			r.content = v.Raw[1 : len(v.Raw)-1]
		}
	}
	if u := gjson.Get(d, "usage"); u.IsObject() {
		r.usage = referenceUsage(u)
		if r.usage.Reported {
			if v := gjson.Get(d, "service_tier"); v.Type == gjson.String {
				r.usage.Tier = pricing.ParseServiceTier(v.Str)
			}
		}
		c := gjson.Get(d, "choices")
		if !includeUsage && (!c.Exists() || (c.IsArray() && c.Get("#").Int() == 0)) {
			r.hidden = true
		}
	}
}
