package usagev1_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// fill sets every field of m, recursively, to a value that differs by
// field (n counts the values handed out), so that an encoder that skips,
// reorders or mistypes a field gives other bytes.
func fill(m protoreflect.Message, n *int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				if fd.Message() != nil {
					e := l.NewElement()
					fill(e.Message(), n)
					l.Append(e)
				} else {
					l.Append(scalar(fd, n))
				}
			}
		case fd.IsMap():
			t := fd.Message().Fields()
			m.Mutable(fd).Map().Set(scalar(t.ByNumber(1), n).MapKey(), scalar(t.ByNumber(2), n))
		case fd.Message() != nil:
			fill(m.Mutable(fd).Message(), n)
		default:
			m.Set(fd, scalar(fd, n))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, n *int) protoreflect.Value {
	*n++
	v := *n
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s" + string(rune('a'+v%26)) + "é")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(v), 0, 0xff})
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-v * 1000))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(-v) << 40)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v) << 20)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(v) << 50)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(v) + 0.25)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(v % vals.Len()).Number())
	}
	panic("unhandled kind " + fd.Kind().String())
}

// The publisher encodes events with the generated vtproto code
// (usage_vtproto.pb.go) and the consumers may decode with it: both must
// agree with the protobuf runtime on every field of the schema.
func TestVTProtoMatchesProto(t *testing.T) {
	for _, m := range []interface {
		proto.Message
		MarshalVT() ([]byte, error)
		SizeVT() int
	}{&usagev1.UsageEvent{}, &usagev1.UsageBatch{}, &usagev1.BudgetCheck{}, &usagev1.SpendTotal{}} {
		name := string(m.ProtoReflect().Descriptor().FullName())
		n := 0
		fill(m.ProtoReflect(), &n)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatalf("%s: proto.Marshal: %v", name, err)
		}
		got, err := m.MarshalVT()
		if err != nil {
			t.Fatalf("%s: MarshalVT: %v", name, err)
		}
		if !bytes.Equal(got, want) || m.SizeVT() != len(want) {
			t.Errorf("%s: MarshalVT gave %d bytes (SizeVT %d), proto.Marshal %d; they differ", name, len(got), m.SizeVT(), len(want))
		}
		back := m.ProtoReflect().New().Interface()
		if err := back.(interface{ UnmarshalVT([]byte) error }).UnmarshalVT(want); err != nil {
			t.Fatalf("%s: UnmarshalVT: %v", name, err)
		}
		if !proto.Equal(back, m) {
			t.Errorf("%s: UnmarshalVT of proto.Marshal's bytes differs from the original", name)
		}
	}
}
