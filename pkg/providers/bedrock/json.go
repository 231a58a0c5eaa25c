package bedrock

import (
	"strconv"
	"unsafe"

	"github.com/tollgate/tollgate/pkg/rawjson"
)

const hexDigits = "0123456789abcdef"

func appendInt(dst []byte, n int64) []byte   { return strconv.AppendInt(dst, n, 10) }
func appendUint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }
func bytesString(b []byte) string            { return unsafe.String(unsafe.SliceData(b), len(b)) }

// rawMember is rawjson.Member: the raw value of key in obj, never decoded,
// so reading text with escapes costs no allocation.
func rawMember(obj, key string) string { return rawjson.Member(obj, key) }
