package usage

import (
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// wireShape is what proto.Unmarshal takes without complaint or unknown
// fields for one message type, by field number: each field's wire type,
// whether it is a string (UTF-8, every copy), and for a message field its
// own shape. It is built from the generated descriptors, so a field added
// to usage.proto is covered without a change here.
type wireShape struct {
	fields []wireField // by field number
}

type wireField struct {
	known bool
	typ   protowire.Type
	utf8  bool
	msg   *wireShape
}

// batchShape is UsageBatch's, with UsageEvent's and BudgetCheck's inside,
// built on first use: a gateway, which only encodes, never builds it.
var batchShape = sync.OnceValue(func() *wireShape {
	return newWireShape((&usagev1.UsageBatch{}).ProtoReflect().Descriptor())
})

func newWireShape(md protoreflect.MessageDescriptor) *wireShape {
	fds := md.Fields()
	top := protowire.Number(0)
	for i := range fds.Len() {
		top = max(top, fds.Get(i).Number())
	}
	s := &wireShape{fields: make([]wireField, top+1)}
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := wireField{known: true}
		switch fd.Kind() {
		case protoreflect.StringKind:
			f.typ, f.utf8 = protowire.BytesType, true
		case protoreflect.BytesKind:
			f.typ = protowire.BytesType
		case protoreflect.MessageKind:
			f.typ, f.msg = protowire.BytesType, newWireShape(fd.Message())
		case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
			f.typ = protowire.Fixed32Type
		case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
			f.typ = protowire.Fixed64Type
		case protoreflect.GroupKind:
			f.known = false // never written; left to proto.Unmarshal
		default:
			f.typ = protowire.VarintType
		}
		if fd.IsList() && f.typ != protowire.BytesType {
			f.known = false // a packed list comes as bytes: left to proto.Unmarshal
		}
		s.fields[fd.Number()] = f
	}
	return s
}

// valid reports whether b is a message of shape s with nothing
// UnmarshalVT takes more leniently than proto.Unmarshal: every field known
// and of its wire type, every varint within 64 bits (protowire's checks),
// every copy of a string field UTF-8, and nested messages likewise.
func (s *wireShape) valid(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || int(num) >= len(s.fields) {
			return false
		}
		b = b[n:]
		f := &s.fields[num]
		if !f.known || f.typ != typ {
			return false
		}
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || f.utf8 && !utf8.Valid(v) || f.msg != nil && !f.msg.valid(v) {
				return false
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
