package providers

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// testPolicy maps model, stream, messages and temperature, drops seed
// and refuses the rest.
func testPolicy() *ChatPolicy {
	rules := []Rule{
		{Param: ParamMessages, Action: Map, To: "`contents`"},
		{Param: ParamTemperature, Action: Map, To: "`temperature`"},
		{Param: ParamSeed, Action: Drop, Note: "no seed"},
		{Param: ParamModel, Action: Map, To: "the URL"},
		{Param: ParamStream, Action: Map, To: "`stream`"},
	}
	for _, p := range ChatParams() {
		if p > ParamStream && p != ParamTemperature && p != ParamSeed {
			rules = append(rules, Rule{Param: p, Action: Refuse, Note: "not supported by Upstream X"})
		}
	}
	return NewChatPolicy("x", "Upstream X", rules...)
}

func TestChatPolicyRead(t *testing.T) {
	pol := testPolicy()
	tests := []struct {
		name, body string
		refused    string // the ParamError's Param; "" when read
		messages   string // the raw messages read
		temp       string
	}{
		{name: "mapped", body: `{"messages":[1], "temperature" : 0.5}`, messages: "[1]", temp: "0.5"},
		{name: "dropped", body: `{"messages":[],"seed":7}`, messages: "[]"},
		{name: "unknown member ignored", body: `{"messages":[],"x_custom":{"a":1}}`, messages: "[]"},
		{name: "last of a repeated member", body: `{"temperature":1,"temperature":2}`, temp: "2"},
		{name: "escaped name", body: `{"temp\u0065rature":1}`, temp: "1"},
		{name: "refused", body: `{"messages":[],"presence_penalty":0.5}`, refused: "presence_penalty"},
		{name: "refused escaped", body: `{"presence\u005fpenalty":0.5}`, refused: "presence_penalty"},
		{name: "null passes", body: `{"audio":null,"functions":null}`},
		{name: "neutral penalty", body: `{"presence_penalty":0,"frequency_penalty":0.0}`},
		{name: "neutral n", body: `{"n":1}`},
		{name: "n 2", body: `{"n":2}`, refused: "n"},
		{name: "n string", body: `{"n":"1"}`, refused: "n"},
		{name: "logprobs false", body: `{"logprobs":false,"top_logprobs":0}`},
		{name: "logprobs true", body: `{"logprobs":true}`, refused: "logprobs"},
		{name: "top_logprobs 0 as string", body: `{"top_logprobs":"0"}`, refused: "top_logprobs"},
		{name: "empty logit_bias", body: `{"logit_bias":{ }}`},
		{name: "logit_bias", body: `{"logit_bias":{"1":-100}}`, refused: "logit_bias"},
		{name: "logit_bias not an object", body: `{"logit_bias":[]}`, refused: "logit_bias"},
		{name: "text modality", body: `{"modalities":["text"]}`},
		{name: "no modality", body: `{"modalities":[]}`},
		{name: "audio modality", body: `{"modalities":["text","audio"]}`, refused: "modalities"},
		{name: "modalities as a string", body: `{"modalities":"text"}`, refused: "modalities"},
		{name: "text response format", body: `{"response_format":{"type":"text"}}`},
		{name: "json response format", body: `{"response_format":{"type":"json_object"}}`, refused: "response_format"},
		{name: "audio", body: `{"audio":{"voice":"x"}}`, refused: "audio"},
		{name: "not JSON", body: `{"messages":[`, refused: "body"},
		{name: "not an object", body: ` [1]`, refused: "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r ChatRequest
			err := pol.Read(&r, &Call{Body: []byte(tt.body)})
			if tt.refused != "" {
				var pe *ParamError
				if !errors.As(err, &pe) || pe.Param != tt.refused {
					t.Fatalf("err %v, want a ParamError for %s", err, tt.refused)
				}
				if !strings.HasPrefix(pe.Message, tt.refused+": ") {
					t.Errorf("message %q does not lead with the parameter", pe.Message)
				}
				if tt.refused != "body" && !strings.Contains(pe.Message, "Upstream X") {
					t.Errorf("message %q does not name the upstream", pe.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Raw(ParamMessages); got != tt.messages {
				t.Errorf("messages %q, want %q", got, tt.messages)
			}
			if got := r.Raw(ParamTemperature); got != tt.temp {
				t.Errorf("temperature %q, want %q", got, tt.temp)
			}
			if got := r.Raw(ParamSeed); got != "" {
				t.Errorf("a dropped member was read: %q", got)
			}
		})
	}
}

func TestNewChatPolicyChecks(t *testing.T) {
	full := testPolicy().Rules()
	tests := []struct {
		name  string
		rules []Rule
	}{
		{"missing rule", full[1:]},
		{"two rules", append(append([]Rule{}, full...), full[0])},
		{"refusal without the upstream's name", append(append([]Rule{}, full[1:]...), Rule{Param: full[0].Param, Action: Refuse, Note: "no"})},
		{"no action", append(append([]Rule{}, full[1:]...), Rule{Param: full[0].Param})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			NewChatPolicy("x", "Upstream X", tt.rules...)
		})
	}
}

func TestChatParamNames(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range ChatParams() {
		name := p.String()
		if name == "" || seen[name] {
			t.Errorf("parameter %d: name %q empty or repeated", p, name)
		}
		seen[name] = true
		if chatParamByName[name] != p {
			t.Errorf("%s does not map back to itself", name)
		}
	}
}

// BenchmarkChatPolicyRead measures the one pass over a typical request's
// members. Expected: 0 allocs/op.
func BenchmarkChatPolicyRead(b *testing.B) {
	pol := testPolicy()
	c := &Call{Body: []byte(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there, \"friend\"\n"}],"temperature":0.2,"seed":7,"presence_penalty":0,"stream":null}`)}
	c.Scanned = true
	b.SetBytes(int64(len(c.Body)))
	b.ReportAllocs()
	for b.Loop() {
		var r ChatRequest
		if err := pol.Read(&r, c); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzChatPolicyRead checks the reader against encoding/json on valid
// objects: each mapped member is the raw value encoding/json keeps (the
// last of repeated keys, escaped names decoded), and a refusal happens
// exactly when a refused member is not neutral.
func FuzzChatPolicyRead(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"temperature":0.5}`,
		`{"temperature":1,"temp\u0065rature":2,"seed":3}`,
		`{"n":1,"logprobs":false,"modalities":["text"],"logit_bias":{}}`,
		`{"presence_penalty":0.5}`,
		`{"response_format":{"type":"text"}, "audio":null}`,
	} {
		f.Add(s)
	}
	pol := testPolicy()
	f.Fuzz(func(t *testing.T, body string) {
		var r ChatRequest
		err := pol.Read(&r, &Call{Body: []byte(body)})
		var members map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &members) != nil || !ValidJSON([]byte(body)) || members == nil {
			var pe *ParamError
			if ValidJSON([]byte(body)) && !errors.As(err, &pe) {
				t.Fatalf("%s: err %v, want a ParamError for a body that is not an object", body, err)
			}
			return
		}
		refused := ""
		for name, v := range members {
			p, ok := chatParamByName[name]
			if ok && pol.Action(p) == Refuse && !Neutral(p, string(v)) {
				refused = name
			}
		}
		if (err != nil) != (refused != "") {
			t.Fatalf("%s: err %v, refused member %q", body, err, refused)
		}
		if err != nil {
			return
		}
		for _, p := range []ChatParam{ParamMessages, ParamTemperature, ParamModel, ParamStream} {
			if got, want := r.Raw(p), string(members[p.String()]); got != want {
				t.Fatalf("%s: %s = %q, encoding/json %q", body, p, got, want)
			}
		}
	})
}
