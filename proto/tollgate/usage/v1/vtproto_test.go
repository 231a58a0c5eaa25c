package usagev1_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate/tollgate/pkg/usage"
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

// fullBatch is a batch with every field set (fill) and a valid producer.
func fullBatch() *usagev1.UsageBatch {
	var b usagev1.UsageBatch
	n := 0
	fill(b.ProtoReflect(), &n)
	b.ProducerId, b.Seq = "gw1", 7
	return &b
}

// eachString calls f with a setter for every string value in m, its
// fields, list elements and nested messages.
func eachString(m protoreflect.Message, f func(set func(string))) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range l.Len() {
				if fd.Message() != nil {
					eachString(l.Get(j).Message(), f)
				} else if fd.Kind() == protoreflect.StringKind {
					f(func(s string) { l.Set(j, protoreflect.ValueOfString(s)) })
				}
			}
		case fd.Message() != nil && !fd.IsMap():
			eachString(m.Mutable(fd).Message(), f)
		case fd.Kind() == protoreflect.StringKind:
			f(func(s string) { m.Set(fd, protoreflect.ValueOfString(s)) })
		}
	}
}

// TestDecodeRejectsInvalidUTF8: every string of a batch or of a legacy
// event, set to bytes that are not UTF-8, makes usage.DecodeMessage fail,
// as proto.Unmarshal fails; UnmarshalVT alone would take them.
func TestDecodeRejectsInvalidUTF8(t *testing.T) {
	var b usagev1.UsageBatch
	if err := usage.DecodeMessage(mustVT(t, fullBatch()), &b); err != nil {
		t.Fatalf("full batch: %v", err)
	}
	if !proto.Equal(&b, fullBatch()) {
		t.Fatal("full batch decoded to something else")
	}
	n := 0
	for i := 0; ; i++ {
		in := fullBatch()
		k := 0
		eachString(in.ProtoReflect(), func(set func(string)) {
			if k == i {
				set("ok\xffno")
			}
			k++
		})
		if i >= k {
			break
		}
		data := mustVT(t, in)
		if err := usage.DecodeMessage(data, &b); err == nil {
			t.Errorf("string %d of %d set to invalid UTF-8: decoded without an error", i, k)
		}
		if err := proto.Unmarshal(data, new(usagev1.UsageBatch)); err == nil {
			t.Errorf("string %d: proto.Unmarshal took it, so the reference is wrong", i)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("only %d strings visited", n)
	}
	// A legacy message: one event, not in a batch.
	ev := fullBatch().Events[0]
	ev.Budgets[1].PeriodStart = "\xc3"
	if err := usage.DecodeMessage(mustVT(t, ev), &b); err == nil {
		t.Error("legacy event with an invalid string: decoded without an error")
	}
}

func mustVT(t *testing.T, m interface{ MarshalVT() ([]byte, error) }) []byte {
	t.Helper()
	data, err := m.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// referenceDecode is usage.DecodeMessage as it was written with
// proto.Unmarshal (reflection), kept as the reference of FuzzDecodeMessage.
// A compressed message is expanded with s2.Decode first, under the same
// bound on its expanded size.
func referenceDecode(data []byte) (proto.Message, error) {
	if usage.Compressed(data) {
		n, err := s2.DecodedLen(data[1:])
		if err != nil {
			return nil, err
		}
		if n > 4<<20 {
			return nil, errors.New("expands past 4 MiB")
		}
		if data, err = s2.Decode(nil, data[1:]); err != nil {
			return nil, err
		}
	}
	var b usagev1.UsageBatch
	if err := proto.Unmarshal(data, &b); err != nil {
		return nil, err
	}
	if b.ProducerId == "" {
		if b.Seq != 0 || len(b.Events) != 0 {
			return nil, errors.New("batch fields without a producer id")
		}
		ev := &usagev1.UsageEvent{}
		if err := proto.Unmarshal(data, ev); err != nil {
			return nil, err
		}
		return &usagev1.UsageBatch{Events: []*usagev1.UsageEvent{ev}}, nil
	}
	if !usage.ValidProducerID(b.ProducerId) || b.Seq == 0 {
		return nil, errors.New("bad producer or seq")
	}
	return &b, nil
}

// FuzzDecodeMessage holds usage.DecodeMessage (UnmarshalVT where its
// result is plain, proto.Unmarshal otherwise) to the proto.Unmarshal
// reference: both refuse the same messages and decode the others alike.
func FuzzDecodeMessage(f *testing.F) {
	full := fullBatch()
	fullData, _ := full.MarshalVT()
	f.Add(fullData)
	f.Add(fullData[:len(fullData)/2])
	ev, _ := full.Events[0].MarshalVT()
	f.Add(ev)
	compressed := usage.Compress(nil, fullData)
	f.Add(compressed)
	f.Add(compressed[:len(compressed)/2])
	f.Add(usage.Compress(nil, ev))
	f.Add([]byte{0x00, 0x80, 0x80, 0x80, 0x04}) // compressed, claiming 8 MiB
	f.Add([]byte{})
	f.Add([]byte{0xc2, 0x3e, 0x02, 0x08, 0x01}) // field 1000 with a varint where a string is
	f.Fuzz(func(t *testing.T, data []byte) {
		var got usagev1.UsageBatch
		err := usage.DecodeMessage(data, &got)
		want, werr := referenceDecode(data)
		switch {
		case err == nil && werr != nil:
			t.Fatalf("decoded what the reference refuses (%v)", werr)
		case err == nil && !proto.Equal(&got, want):
			t.Fatalf("decoded %v, the reference %v", &got, want)
		case err != nil && werr == nil:
			t.Fatalf("refused (%v) what the reference decodes", err)
		}
		// Aliased, into a batch that last held the full one (every field of
		// its events set): the reused events must come out as fresh ones.
		var aliased usagev1.UsageBatch
		var plain []byte
		if err := usage.DecodeMessageAliased(compressed, &aliased, &plain); err != nil {
			t.Fatal(err)
		}
		aerr := usage.DecodeMessageAliased(data, &aliased, &plain)
		if (aerr == nil) != (err == nil) || err == nil && !proto.Equal(&aliased, &got) {
			t.Fatalf("aliased decode %v (%v), the copying one %v (%v)", &aliased, aerr, &got, err)
		}
	})
}
