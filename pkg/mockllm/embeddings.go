package mockllm

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// embeddings answers POST /v1/embeddings. Each vector is derived from its
// input's JSON text alone (same input, same vector) and has unit length. The size is
// the mock dims setting, else the request's dimensions, else Config.Dims.
func (s *Server) embeddings(ctx *fasthttp.RequestCtx) {
	s.stats.embeddings.Add(1)
	r, ok := parseRequest(ctx)
	if !ok {
		return
	}
	tokens, inputs := inputTokens(r.input)
	if inputs == 0 {
		badRequest(ctx, "input must be a non-empty string or array", "input")
		return
	}
	dims := s.dims
	if r.dimensions.Exists() {
		d := r.dimensions.Int()
		if r.dimensions.Type != gjson.Number || d < 1 || d > maxDims {
			badRequest(ctx, "dimensions must be an integer between 1 and 16384", "dimensions")
			return
		}
		dims = int(d)
	}
	var b64 bool
	switch r.encodingFormat.Str {
	case "", "float":
	case "base64":
		b64 = true
	default:
		badRequest(ctx, "encoding_format must be float or base64", "encoding_format")
		return
	}
	b := resolveBehaviour(s.defaults, r.mock, &ctx.Request.Header)
	if b.dims > 0 {
		dims = b.dims
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	if !s.prelude(ctx, &b, sc.timer) {
		return
	}
	if b.garbage {
		s.writeGarbage(ctx)
		return
	}
	s.stats.promptTokens.Add(int64(tokens))
	s.ledger.served(r.model.Raw, tokens, 0, !b.noUsage)
	if cap(sc.vec) < dims {
		sc.vec = make([]float32, dims)
	}
	vec := sc.vec[:dims]
	dst := append(sc.buf[:0], `{"object":"list","data":[`...)
	i := 0
	forEachInput(r.input, func(raw string) {
		if i > 0 {
			dst = append(dst, ',')
		}
		embed(vec, raw)
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = appendInt(dst, int64(i))
		dst = append(dst, `,"embedding":`...)
		if b64 {
			dst = appendBase64(dst, vec)
		} else {
			dst = appendFloats(dst, vec)
		}
		dst = append(dst, '}')
		i++
	})
	dst = append(dst, `],"model":`...)
	dst = append(dst, r.model.Raw...)
	if !b.noUsage {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
		dst = appendInt(dst, int64(tokens))
		dst = append(dst, `,"total_tokens":`...)
		dst = appendInt(dst, int64(tokens))
		dst = append(dst, '}')
	}
	sc.buf = append(dst, '}')
	ctx.SetContentType(contentJSON)
	ctx.SetBody(sc.buf)
}

// embed fills vec with a unit vector seeded by text.
func embed(vec []float32, text string) {
	// FNV-1a of the text seeds a splitmix64 sequence.
	x := uint64(14695981039346656037)
	for i := 0; i < len(text); i++ {
		x ^= uint64(text[i])
		x *= 1099511628211
	}
	var sum float64
	for j := range vec {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		f := float32(int32(z>>32)) / (1 << 31) // in [-1, 1)
		vec[j] = f
		sum += float64(f) * float64(f)
	}
	if sum == 0 {
		return
	}
	scale := float32(1 / math.Sqrt(sum))
	for j := range vec {
		vec[j] *= scale
	}
}

// appendFloats appends vec as a JSON array of shortest float32 decimals.
func appendFloats(dst []byte, vec []float32) []byte {
	dst = append(dst, '[')
	for j, f := range vec {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
	}
	return append(dst, ']')
}

// appendBase64 appends vec as a JSON string holding the base64 of its
// little-endian float32 bytes, as OpenAI's encoding_format "base64" does.
func appendBase64(dst []byte, vec []float32) []byte {
	// Blocks of 48 floats are 192 bytes, a multiple of 3, so only the last
	// block may end with padding.
	const block = 48
	var raw [4 * block]byte
	enc := base64.StdEncoding
	dst = append(dst, '"')
	for len(vec) > 0 {
		n := min(len(vec), block)
		for j, f := range vec[:n] {
			binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(f))
		}
		dst = enc.AppendEncode(dst, raw[:4*n])
		vec = vec[n:]
	}
	return append(dst, '"')
}
