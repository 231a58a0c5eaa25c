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
// every copy of a string field UTF-8, and nested messages likewise. Tags
// of one or two bytes and lengths and varints of one byte, nearly all of
// an event's, are read inline; longer ones by protowire.
func (s *wireShape) valid(b []byte) bool {
	for len(b) > 0 {
		var num protowire.Number
		var typ protowire.Type
		if c := b[0]; c < 0x80 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
			b = b[1:]
		} else if len(b) > 1 && b[1] < 0x80 {
			v := uint64(c&0x7f) | uint64(b[1])<<7
			num, typ = protowire.Number(v>>3), protowire.Type(v&7)
			b = b[2:]
		} else {
			var n int
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return false
			}
			b = b[n:]
		}
		if int(num) >= len(s.fields) {
			return false
		}
		f := &s.fields[num]
		if !f.known || f.typ != typ {
			return false
		}
		switch typ {
		case protowire.BytesType:
			var v []byte
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, b = b[1:1+b[0]], b[1+b[0]:]
			} else {
				var n int
				if v, n = protowire.ConsumeBytes(b); n < 0 {
					return false
				}
				b = b[n:]
			}
			if f.utf8 && !utf8.Valid(v) || f.msg != nil && !f.msg.valid(v) {
				return false
			}
		case protowire.VarintType:
			if len(b) > 0 && b[0] < 0x80 {
				b = b[1:]
				continue
			}
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}
