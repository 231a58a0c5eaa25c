package mockllm_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

type embeddingList struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors decodes every embedding, float arrays or base64 strings.
func (l *embeddingList) vectors(t *testing.T, b64 bool) [][]float32 {
	t.Helper()
	var out [][]float32
	for i, d := range l.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Errorf("item %d: object %q index %d", i, d.Object, d.Index)
		}
		var v []float32
		if b64 {
			var s string
			if err := json.Unmarshal(d.Embedding, &s); err != nil {
				t.Fatalf("base64 embedding is not a string: %s", d.Embedding)
			}
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("decode base64 (%d bytes): %v", len(raw), err)
			}
			for j := 0; j < len(raw); j += 4 {
				v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
			}
		} else if err := json.Unmarshal(d.Embedding, &v); err != nil {
			t.Fatalf("float embedding: %v", err)
		}
		out = append(out, v)
	}
	return out
}

func TestEmbeddings(t *testing.T) {
	ts := start(t, mockllm.Config{Dims: 64})
	tests := []struct {
		name, body string
		headers    []string
		inputs     int
		dims       int
		tokens     int
	}{
		{"string", `{"model":"emb","input":"the quick brown fox"}`, nil, 1, 64, 4},
		{"array", `{"model":"emb","input":["a b","c","the quick brown fox"]}`, nil, 3, 64, 7},
		{"token ids", `{"model":"emb","input":[1,2,3]}`, nil, 1, 64, 3},
		{"token id arrays", `{"model":"emb","input":[[1,2],[3]]}`, nil, 2, 64, 3},
		{"request dimensions", `{"model":"emb","input":"x","dimensions":8}`, nil, 1, 8, 1},
		{"mock dims over request", `{"model":"emb","input":"x","dimensions":8}`, []string{"X-Mock-Dims", "5"}, 1, 5, 1},
		{"body mock dims", `{"model":"emb","input":"x","mock":{"dims":3}}`, nil, 1, 3, 1},
		{"default size", `{"model":"emb","input":"x","mock":{"dims":0}}`, nil, 1, 64, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var floats, b64 embeddingList
			ts.postJSON(t, "/v1/embeddings", tt.body, &floats, tt.headers...)
			ts.postJSON(t, "/v1/embeddings", tt.body[:len(tt.body)-1]+`,"encoding_format":"base64"}`, &b64, tt.headers...)
			for _, l := range []embeddingList{floats, b64} {
				if l.Object != "list" || l.Model != "emb" || len(l.Data) != tt.inputs {
					t.Fatalf("list %q model %q with %d items, want %d", l.Object, l.Model, len(l.Data), tt.inputs)
				}
				if l.Usage == nil || l.Usage.PromptTokens != tt.tokens || l.Usage.TotalTokens != tt.tokens {
					t.Errorf("usage %+v, want %d tokens", l.Usage, tt.tokens)
				}
			}
			fv, bv := floats.vectors(t, false), b64.vectors(t, true)
			for i := range fv {
				if len(fv[i]) != tt.dims || len(bv[i]) != tt.dims {
					t.Fatalf("item %d: %d and %d dims, want %d", i, len(fv[i]), len(bv[i]), tt.dims)
				}
				var norm float64
				for j := range fv[i] {
					if fv[i][j] != bv[i][j] {
						t.Fatalf("item %d dim %d: float %v, base64 %v", i, j, fv[i][j], bv[i][j])
					}
					norm += float64(fv[i][j]) * float64(fv[i][j])
				}
				if math.Abs(norm-1) > 1e-4 {
					t.Errorf("item %d has squared norm %v, want 1", i, norm)
				}
			}
		})
	}
}

func TestEmbeddingsDeterministic(t *testing.T) {
	ts := start(t, mockllm.Config{})
	var a, b embeddingList
	ts.postJSON(t, "/v1/embeddings", `{"model":"emb","input":["same","other","same"]}`, &a)
	ts.postJSON(t, "/v1/embeddings", `{"model":"emb","input":"same","mock":{"no_usage":true}}`, &b)
	va, vb := a.vectors(t, false), b.vectors(t, false)
	if len(va[0]) != 1536 {
		t.Errorf("default dims %d, want 1536", len(va[0]))
	}
	if b.Usage != nil {
		t.Errorf("usage with no_usage: %+v", b.Usage)
	}
	equal := func(x, y []float32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return len(x) == len(y)
	}
	if !equal(va[0], va[2]) || !equal(va[0], vb[0]) {
		t.Error("the same text gave different vectors")
	}
	if equal(va[0], va[1]) {
		t.Error("different texts gave the same vector")
	}
}
