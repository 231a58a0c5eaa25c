package gateway

import (
	"math/bits"
	"sync"

	"github.com/valyala/fasthttp"
)

// A large request body that limitBody reads in full goes into a pooled
// buffer of its size class. The server's connections give their own body
// buffers back after each response (ReduceMemoryUsage: hundreds of idle
// keep-alive connections then hold no body), and fasthttp's pool hands
// them out again at the usual request's size: each large body would grow a
// new buffer from a few KiB, in fresh pages (make bench: 3x the CPU of a
// 64 KB request, 5x at 512 KB). A bodyBuf is reused instead. It goes back
// to its pool when fasthttp resets the request after the response is
// written, streamed answers included: fasthttp closes the request's user
// values that are io.Closers then. Nothing may keep the body beyond that;
// with connections keeping their buffers, the next request on the same
// connection would have overwritten it just the same.
type bodyBuf struct {
	b     []byte
	class int // index in bodyPools
}

const (
	minBodyClass = 14 // 16 KiB: smaller bodies stay in fasthttp's pool
	maxBodyClass = 24 // 16 MiB: larger bodies get a buffer of their own
)

var bodyPools [maxBodyClass - minBodyClass + 1]sync.Pool

// bodyBufKey is the request user value holding its bodyBuf.
type bodyBufKey struct{}

// Close gives bb back to its pool.
func (bb *bodyBuf) Close() error {
	bodyPools[bb.class].Put(bb)
	return nil
}

// pooledBody returns a buffer of n bytes for the body of ctx's request,
// from bodyPools, given back once the response is written; ok is false
// when n is outside the pooled classes.
func pooledBody(ctx *fasthttp.RequestCtx, n int) (b []byte, ok bool) {
	class := bits.Len(uint(n - 1)) // the least with n <= 1<<class
	if n < 1<<minBodyClass || class > maxBodyClass {
		return nil, false
	}
	i := class - minBodyClass
	bb, _ := bodyPools[i].Get().(*bodyBuf)
	if bb == nil {
		bb = &bodyBuf{b: make([]byte, 1<<class), class: i}
	}
	ctx.SetUserValue(bodyBufKey{}, bb)
	return bb.b[:n], true
}
